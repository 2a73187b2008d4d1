"""docs/api.md is current: generated from the docstrings of every public name
(`sparklog.__all__` and the helpers jobs/api_reference.py adds), each with a docstring."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

import sparklog

pytest.importorskip("pyspark")
ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "api_reference", ROOT / "jobs" / "api_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_page_is_what_the_docstrings_give():
    page = (ROOT / "docs" / "api.md").read_text()
    assert page == _generator().render(), "docs/api.md is out of date: run `make docs`"


def test_every_public_name_is_on_the_page_with_its_docstring():
    page = (ROOT / "docs" / "api.md").read_text()
    for name in sparklog.__all__:
        obj = getattr(sparklog, name)
        doc = inspect.getdoc(obj)
        assert doc and len(doc) > 20, f"sparklog.{name} has no docstring"
        assert f"## `sparklog.{name}(" in page
        assert inspect.cleandoc(doc) in page


def test_the_readme_links_the_api_page():
    assert "](docs/api.md)" in (ROOT / "README.md").read_text()
