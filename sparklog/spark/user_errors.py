"""Errors the user made, shown as Spark's summary line instead of a traceback's last line.

Spark wraps an exception raised in a Python data source as `[PYTHON_DATA_SOURCE_ERROR] …
Traceback (most recent call last): …` with the message at the bottom, so a notebook's one-line
summary says nothing useful. PySpark's worker prints only the exception's type and message
when `SPARK_HIDE_TRACEBACK` is set in the worker (`pyspark.util.handle_worker_exception`,
what `spark.sql.execution.pyspark.udf.hideTraceback.enabled` turns on). For the errors that
are the user's to fix (a bad option, a missing topic, an unreachable cluster) the traceback
shows only sparklog's internals, so `user_errors()` sets it in that worker process as such an
error leaves the data source; bugs keep their traceback (a worker reused after a user error
drops the setting again at its next call, unless Spark's own configuration had set it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"

#: whether this process's SPARK_HIDE_TRACEBACK is ours (set for a user error), not Spark's
_set_by_us = False


class SparkLogSourceError(RuntimeError):
    """Base of the data source's own errors that are not Kafka errors (message first)."""


@contextmanager
def user_errors() -> Iterator[None]:
    """Show the user's errors raised inside as `type: message` only (see the module doc)."""
    global _set_by_us
    from sparklog.errors import KafkaError
    from sparklog.settings import ConfigError

    if _set_by_us:  # a reused worker: the last call's user error is not this call's
        os.environ.pop(HIDE_TRACEBACK, None)
        _set_by_us = False
    try:
        yield
    except (ConfigError, KafkaError, SparkLogSourceError):
        if HIDE_TRACEBACK not in os.environ:
            os.environ[HIDE_TRACEBACK] = "1"
            _set_by_us = True
        raise
