"""sparklog installs as a library (issue 35 §3): pyproject.toml states compatible ranges, so
`pip install sparklog` fits an existing PySpark environment instead of replacing its PySpark;
the exact versions the project tests with are in constraints.txt, which `make venv` installs
with, so CI stays reproducible."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements() -> list[Requirement]:
    project = PROJECT["project"]
    extras = project["optional-dependencies"].values()
    return [Requirement(r) for r in project["dependencies"] + [r for e in extras for r in e]]


def pins() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin (name==version)"
            out[canonicalize_name(name)] = Version(version)
    return out


def test_library_requirements_are_ranges_not_pins():
    exact = [str(r) for r in requirements() if any(s.operator == "==" for s in r.specifier)]
    assert exact == [], "pin exact versions in constraints.txt, not pyproject.toml"


def test_pyspark_range_starts_at_the_oldest_tested_version_and_admits_newer_ones():
    (pyspark,) = [r for r in requirements() if r.name == "pyspark"]
    tested = pins()["pyspark"]
    assert tested in pyspark.specifier
    assert Version("4.3.0") in pyspark.specifier  # a PySpark 4.3 environment keeps its PySpark
    assert Version("4.1.1") not in pyspark.specifier  # older than anything tested
    numpy = next(r for r in requirements() if r.name == "numpy")
    assert Version("2.3.5") in numpy.specifier  # a numpy<2.4 environment resolves


def test_every_requirement_is_pinned_in_constraints_within_its_range():
    pinned = pins()
    for r in requirements():
        name = canonicalize_name(r.name)
        assert name in pinned, f"{r.name} has no exact version in constraints.txt"
        assert pinned[name] in r.specifier, f"constraints.txt's {r.name}=={pinned[name]} is not {r}"


def test_make_venv_installs_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    stamp_rule = makefile.split("$(STAMP): ", 1)[1].split("\n\n", 1)[0]
    assert "constraints.txt" in stamp_rule.splitlines()[0]  # rebuilt when a pin changes
    assert re.search(r"pip install .*-c constraints\.txt -e '\.\[test,delta\]'", stamp_rule)
    assert "--no-deps" not in makefile  # delta-spark comes with its own requirements


def test_the_package_ships_py_typed():
    assert (ROOT / "sparklog" / "py.typed").exists()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["sparklog"]
