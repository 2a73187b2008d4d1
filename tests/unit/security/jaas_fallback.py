"""Until the shared JAAS parser (`sparklog.security.jaas`, the sasl engineer's) is on this
branch: a tiny stand-in with its expected interface, installed only by tests that need it."""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass, field

_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s;]+)')


@dataclass
class _Entry:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)


def _parse(text: str) -> list[_Entry]:
    entries = []
    for part in filter(str.strip, text.split(";")):
        words = part.strip().split(None, 2)
        entry = _Entry(words[0], words[1])
        for m in _OPTION.finditer(words[2] if len(words) > 2 else ""):
            entry.options[m.group(1)] = m.group(3) if m.group(3) is not None else m.group(2)
        entries.append(entry)
    return entries


def install() -> None:
    try:
        import sparklog.security.jaas  # noqa: F401
    except ImportError:
        module = types.ModuleType("sparklog.security.jaas")
        module.parse_jaas_config = _parse  # type: ignore[attr-defined]
        module.parse_login_module = lambda text, mechanism=None: _parse(text)[0]  # type: ignore[attr-defined]
        sys.modules["sparklog.security.jaas"] = module
