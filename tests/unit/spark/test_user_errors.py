"""`user_errors()` hides the traceback of the user's own errors only: a worker reused after one
shows the next bug's traceback again, and Spark's own setting is left alone."""

from __future__ import annotations

import os

import pytest

from sparklog.errors import UnknownTopicOrPartitionError
from sparklog.spark import user_errors as module
from sparklog.spark.user_errors import HIDE_TRACEBACK, user_errors


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv(HIDE_TRACEBACK, raising=False)
    monkeypatch.setattr(module, "_set_by_us", False)


def test_a_user_error_hides_the_traceback_and_the_next_call_shows_them_again():
    with pytest.raises(UnknownTopicOrPartitionError), user_errors():
        raise UnknownTopicOrPartitionError("Topic 'ordres' not present")
    assert os.environ[HIDE_TRACEBACK] == "1"
    with pytest.raises(ZeroDivisionError), user_errors():  # a bug, in the same worker
        1 / 0  # noqa: B018
    assert HIDE_TRACEBACK not in os.environ


def test_sparks_own_setting_is_kept(monkeypatch):
    monkeypatch.setenv(HIDE_TRACEBACK, "1")  # spark.sql.execution.pyspark.udf.hideTraceback
    with pytest.raises(UnknownTopicOrPartitionError), user_errors():
        raise UnknownTopicOrPartitionError("x")
    with pytest.raises(ZeroDivisionError), user_errors():
        1 / 0  # noqa: B018
    assert os.environ[HIDE_TRACEBACK] == "1"
