"""The lookup tables behind `sparklog.errors`: Kafka error code and name -> exception class.

Kept apart from the classes so `sparklog/errors.py` stays one class per code and nothing else;
import the tables and lookups from `sparklog.errors` (`BY_CODE`, `BY_NAME`, `error_for_code`,
`error_for_name`), which builds them from its own classes, as Kafka's `Errors` enum indexes
itself by code (`Errors.forCode`) and by exception class.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar


class _Coded(Protocol):
    code: int
    name: str


E = TypeVar("E", bound=_Coded)


class ErrorTable(Generic[E]):
    """Every direct subclass of `base` defined in `module` that states its own code (subclasses
    such as `CorruptBatchError` and errors other modules derive keep their parent's code and are
    not listed), by code and by Kafka's enum name."""

    def __init__(self, base: type[E], module: str, unknown: type[E]) -> None:
        by_code: dict[int, type[E]] = {}
        cls: type[E]
        for cls in base.__subclasses__():
            if cls.__module__ == module and "name" in cls.__dict__:
                assert cls.code not in by_code, f"two classes for error code {cls.code}"
                by_code[cls.code] = cls
        self.by_code = by_code
        self.by_name: dict[str, type[E]] = {c.name: c for c in by_code.values()}
        self._unknown = unknown

    def for_code(self, code: int) -> type[E]:
        """The exception class for a Kafka error code (`unknown` when the code is not listed)."""
        return self.by_code.get(code, self._unknown)

    def for_name(self, name: str) -> type[E]:
        """The exception class for Kafka's error name, e.g. "NOT_COORDINATOR" (KeyError if none)."""
        return self.by_name[name]
