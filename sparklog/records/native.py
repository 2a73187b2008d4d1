"""The optional native record core (DESIGN D13): the `sparklog_native` extension module.

`make` builds it from `native/` (Rust, PyO3, maturin). `core()` returns the module, or None
when it is not installed or switched off with `SPARKLOG_NATIVE=0`; callers then run the
pure-Python codec, which is the reference and gives identical results, only slower. A missing
module is logged once per process (however often it is looked up or switched back on), with the
command that builds it.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

logger = logging.getLogger(__name__)

_OFF = ("0", "false", "no", "off")
_module: ModuleType | None = None
_loaded = False
_warned = False  # the missing module is said once per process, not once per look-up

#: How to get the module: the crate is in the checkout's native/, built by maturin with cargo.
BUILD_HINT = (
    "install it with `pip install ./native` from a sparklog checkout (builds the Rust crate; "
    "needs cargo, https://rustup.rs), or run `make venv` there"
)


def core() -> ModuleType | None:
    """The native module, or None (not built, or `SPARKLOG_NATIVE=0`)."""
    global _module, _loaded
    if not _loaded:
        _module = _load()
        _loaded = True
    return _module


def _load() -> ModuleType | None:
    global _warned
    if os.environ.get("SPARKLOG_NATIVE", "1").strip().lower() in _OFF:
        return None
    try:
        import sparklog_native
    except ImportError:
        if not _warned:
            _warned = True
            logger.warning(
                "sparklog's native record core (sparklog_native) is not installed, so records "
                "are encoded and decoded by the pure-Python codec (slower): %s. Set "
                "SPARKLOG_NATIVE=0 to silence this",
                BUILD_HINT,
            )
        return None
    return sparklog_native


def set_enabled(enabled: bool) -> ModuleType | None:
    """Switch the native core on or off in this process (tests compare both paths)."""
    global _module, _loaded
    _module = _load() if enabled else None
    _loaded = True
    return _module
