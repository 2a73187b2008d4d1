"""Generate docs/api.md, the API reference, from the public names' docstrings.

    python jobs/api_reference.py [--check]

The public API is `sparklog.__all__` (the package's functions), the class `start()` returns
and the streaming helpers users add themselves; each entry is its signature (annotations as
written) and its docstring, public methods and properties of classes included. `--check`
exits 1 when docs/api.md differs from what the docstrings give (`make docs` rewrites it;
tests/unit/test_api_reference.py checks it is current).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api.md"

#: (module, name) of the public names documented beside `sparklog.__all__`
EXTRA = (
    ("sparklog.spark.cluster", "SparkLogCluster"),
    ("sparklog.spark.group_commits", "GroupCommitListener"),
    ("sparklog.spark.progress", "source_metrics"),
    ("sparklog.spark.progress", "SourceLagListener"),
)

HEADER = """# API reference

Generated from the docstrings by `make docs` (`jobs/api_reference.py`); do not edit by hand.
`tests/unit/test_api_reference.py` fails when this page and the code disagree.
Options of `format("sparklog")` are in the [README](../README.md#the-connector-compatible-api).
"""


def _doc(obj: Any) -> str:
    return inspect.cleandoc(inspect.getdoc(obj) or "(no docstring)")


class _Written:
    """An annotation shown as written (`from __future__ import annotations` keeps strings)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _plain(annotation: Any) -> Any:
    return _Written(annotation) if isinstance(annotation, str) else annotation


def _signature(obj: Any) -> str:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = [p.replace(annotation=_plain(p.annotation)) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=_plain(sig.return_annotation)))


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined on `cls` itself, in source order (overrides of
    a base class's hooks, such as a listener's `onQueryProgress`, are the base's API)."""
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_") or any(name in vars(base) for base in cls.__mro__[1:]):
            continue
        if isinstance(value, property) or inspect.isfunction(value):
            out.append((name, value))
        elif isinstance(value, classmethod | staticmethod):
            out.append((name, value.__func__))
    return out


def _entry(qualified: str, obj: Any) -> list[str]:
    if inspect.isclass(obj):
        lines = [f"## class `{qualified}`", "", _doc(obj), ""]
        for name, member in _members(obj):
            if isinstance(member, property):
                lines += [f"### `{name}` (property)", "", _doc(member.fget), ""]
            else:
                lines += [f"### `{name}{_signature(member)}`", "", _doc(member), ""]
        return lines
    return [f"## `{qualified}{_signature(obj)}`", "", _doc(obj), ""]


def public_names() -> list[tuple[str, Any]]:
    """(qualified name, object) of everything the page documents, in page order."""
    import sparklog

    names = [(f"sparklog.{n}", getattr(sparklog, n)) for n in sparklog.__all__]
    for module, name in EXTRA:
        names.append((f"{module}.{name}", getattr(importlib.import_module(module), name)))
    return names


def render() -> str:
    lines = [HEADER]
    for qualified, obj in public_names():
        lines += _entry(qualified, obj)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date: run `make docs`", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
