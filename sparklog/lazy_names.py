"""Package names that load their module on first use (PEP 562), so that importing a package
(on a driver, in every Spark worker) loads only what is used."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package`: `modules` maps each name to the module
    (absolute) that defines it; a name is imported once, then kept on the package."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
