"""`readStream.format("sparklog")` with an ending option fails at `load()`, as Spark's Kafka
source does, where sparklog is registered in the driver.

PySpark 4.2 creates a Python data source at `load()` with its options only and asks its
`schema()`, without saying whether the read is a batch or a stream; the source learns which
only at `reader()` / `streamReader()`, when the query starts. So the source alone can refuse
`endingOffsets`, `endingOffsetsByTimestamp` and `endingTimestamp` in a stream only at query
start. Where `sparklog.register` ran in the driver (it runs at `import sparklog` with an
active session, and in `sparklog.start`), PySpark's `DataStreamReader` records the format and
option names it is given (as `register.append_by_default` does for the writer) and `load()`
raises the source's own error first. Without it, the error comes at query start.
"""

from __future__ import annotations

import functools
from typing import Any


def refuse_ending_options_at_load() -> None:
    """Patch PySpark's `DataStreamReader` once per process (see the module docstring)."""
    from pyspark.sql.streaming.readwriter import DataStreamReader

    if getattr(DataStreamReader, "_sparklog_ending_check", False):
        return
    from sparklog.spark.source import NAME

    original_format = DataStreamReader.format
    original_option = DataStreamReader.option
    original_options = DataStreamReader.options
    original_load = DataStreamReader.load

    def seen(reader: Any) -> set[str]:
        names: set[str] = reader.__dict__.setdefault("_sparklog_options", set())
        return names

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:  # noqa: A001 - PySpark's name
        self._sparklog_format = str(source).lower()
        return original_format(self, source)

    @functools.wraps(original_option)
    def option(self: Any, key: str, value: Any) -> Any:
        seen(self).add(str(key).lower())
        return original_option(self, key, value)

    @functools.wraps(original_options)
    def options(self: Any, **opts: Any) -> Any:
        seen(self).update(str(k).lower() for k in opts)
        return original_options(self, **opts)

    @functools.wraps(original_load)
    def load(
        self: Any,
        path: str | None = None,
        format: str | None = None,  # noqa: A002 - PySpark's name
        schema: Any = None,
        **opts: Any,
    ) -> Any:
        source = str(format or getattr(self, "_sparklog_format", "")).lower()
        if source == NAME:
            _check(seen(self) | {str(k).lower() for k in opts})
        return original_load(self, path, format, schema, **opts)

    # Patching PySpark's class is the point here (see the docstring); its stubs forbid it.
    DataStreamReader.format = format  # type: ignore[method-assign]
    DataStreamReader.option = option  # type: ignore[method-assign]
    DataStreamReader.options = options  # type: ignore[method-assign]
    DataStreamReader.load = load  # type: ignore[method-assign]
    DataStreamReader._sparklog_ending_check = True  # type: ignore[attr-defined]


def _check(names: set[str]) -> None:
    from sparklog.spark.options import refuse_ending_in_stream

    refuse_ending_in_stream(names)
