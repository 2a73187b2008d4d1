"""sparklog's packages import each other only downwards (DESIGN D15, docs/architecture.md
"Layers"): `records` <- `storage` <- {`broker`, `controller`, `coordinator`}, the three servers
standing on a shared floor and never importing each other; `client` on the floor; `cluster`,
`spark` and `cli` on top; pyspark only in `spark` and `cli`.

Every import counts: at module level, inside functions (a lazy import still loads its module
when it runs) and under TYPE_CHECKING (a type a peer names is a dependency on that peer).
Importing `sparklog.a.b` also runs `sparklog/a/__init__.py`, so the package faces a module
passes through are followed too: an `__init__` that eagerly imported a peer would show up here
as its own offending import.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sparklog"

#: What sits at the bottom: imports nothing of sparklog but these, importable by everyone.
BASE = frozenset({"lazy_names", "errors", "structs", "settings"})
#: The shared floor under the three servers (D15): Kafka's `metadata` module, the wire
#: protocol and its request pipeline, security, records and the log.
FLOOR = BASE | {"records", "storage", "security", "protocol", "metadata", "metrics"}
PEERS = frozenset({"broker", "controller", "coordinator"})

#: component -> the components it may import (besides itself). A component is the package (or
#: top-level module) right under `sparklog`. Add a new package here, with its reason.
ALLOWED: dict[str, frozenset[str]] = {
    "lazy_names": frozenset(),
    # the code/name lookup tables `errors` builds from its classes (imported through errors)
    "error_table": frozenset(),
    "errors": frozenset({"lazy_names", "error_table"}),
    "structs": frozenset({"lazy_names", "errors"}),
    "settings": frozenset({"lazy_names", "errors", "structs"}),
    # the bottom of the data path: v2 batches, compression, file slices
    "records": BASE,
    # the log: segments, indexes, producer state, over records
    "storage": BASE | {"records"},
    # TLS, SASL mechanisms, the authorizer: sans-IO, under the pipeline that calls them
    "security": BASE,
    # sensors, stats, quotas and the Prometheus exposition: sans-IO beside security (D19)
    "metrics": BASE,
    # framing, kio schemas, the request pipeline, shared response builders; never the log
    # (a FileRecords slice is a records type) and never metadata (which reads storage's
    # LogConfig), so a client importing the protocol does not load a broker's log
    "protocol": BASE | {"records", "security", "metrics"},
    # the metadata image and records, AlterPartition values, the config vocabulary
    "metadata": BASE | {"records", "storage", "security", "protocol", "metrics"},
    # the three servers: the floor only, never each other
    "broker": FLOOR,
    "controller": FLOOR,
    "coordinator": FLOOR,
    # Kafka clients: the wire protocol and record batches, no log, no metadata image
    "client": BASE | {"records", "security", "protocol", "metrics"},
    # the pinned JAR cache (Spark sessions, the Kafka oracle, tests)
    "jars": frozenset(),
    # launchers: start and wire the servers
    "cluster": FLOOR | PEERS | {"client", "jars"},
    # Apache Kafka as a test oracle; sparklog's own pieces only for ids and layouts
    "oracle": FLOOR | PEERS | {"client", "jars"},
    # the data source and the Spark launcher
    "spark": FLOOR | PEERS | {"client", "cluster", "jars"},
    "cli": FLOOR | PEERS | {"client", "cluster", "spark", "jars", "sparklog"},
    "__main__": frozenset({"cli"}),
    # the package face: `sparklog.start`/`register` and the notebook views load `spark` when
    # called (checked below: at module level it imports lazy_names only)
    "sparklog": frozenset({"lazy_names", "spark"}),
}

#: The only components that may import pyspark: nothing below `spark` does (DESIGN §2). The
#: package face names SparkSession in its signatures under TYPE_CHECKING only
#: (tests/unit/spark/test_import.py checks that importing sparklog loads no pyspark).
PYSPARK_IMPORTERS = frozenset({"spark", "cli", "sparklog"})


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    path: Path
    line: int
    target: str  # the sparklog module it loads, or a third-party top-level name


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def component(module: str) -> str:
    """`sparklog.broker.partition` -> `broker`; `sparklog.errors` -> `errors`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(known: dict[str, Path]) -> list[Import]:
    """Every import of every sparklog module, resolved to the modules it loads: the target and
    each package `__init__` on the way to it (the root package excepted: see ALLOWED)."""
    found = []
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                # `from pkg import name` loads pkg, and pkg.name when that is a module
                targets = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for target in targets:
                if not _ours(target):
                    found.append(Import(module, path, node.lineno, target.partition(".")[0]))
                    continue
                parts = target.split(".")
                for end in range(min(2, len(parts)), len(parts) + 1):  # sparklog.a, sparklog.a.b
                    loaded = ".".join(parts[:end])
                    if loaded in known and loaded != module:
                        found.append(Import(module, path, node.lineno, loaded))
    return found


def _ours(target: str) -> bool:
    return target == "sparklog" or target.startswith("sparklog.")


def layering_violations(known: dict[str, Path]) -> list[str]:
    """One line per offending import: file, line, the deepest module it loads of the
    component it may not import, and the allowed directions."""
    deepest: dict[tuple[Path, int, str], str] = {}
    for imp in imports(known):
        if not _ours(imp.target):
            continue
        source, target = component(imp.module), component(imp.target)
        if source == target or target in ALLOWED.get(source, frozenset()):
            continue
        key = (imp.path, imp.line, target)
        if len(imp.target) > len(deepest.get(key, "")):
            deepest[key] = imp.target
    out = []
    for (path, line, target), module in sorted(deepest.items()):
        source = component(module_name(path))
        may = ", ".join(sorted(ALLOWED.get(source, ()))) or "nothing"
        importers = ", ".join(sorted(c for c, a in ALLOWED.items() if target in a)) or "nobody"
        out.append(
            f"{path.relative_to(ROOT)}:{line} imports {module}: {source} may import {may}; "
            f"{target} may be imported by {importers}. Move the shared piece down to the floor "
            f"({', '.join(sorted(FLOOR))})"
        )
    return out


def test_every_package_has_a_place_in_the_layers():
    unplaced = sorted({component(m) for m in modules()} - set(ALLOWED))
    assert not unplaced, f"{unplaced}: add each to ALLOWED in {Path(__file__).name}, with why"


def test_packages_import_only_downwards():
    violations = layering_violations(modules())
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_the_three_servers_import_only_the_floor():
    # the heart of D15, stated on its own: 0 cross-peer file pairs
    pairs = sorted(
        f"{i.path.relative_to(ROOT)}:{i.line} -> {i.target}"
        for i in imports(modules())
        if component(i.module) in PEERS
        and _ours(i.target)
        and component(i.target) in PEERS - {component(i.module)}
    )
    assert pairs == []
    for peer in PEERS:
        assert ALLOWED[peer] == FLOOR


def test_nothing_below_spark_imports_pyspark():
    found = sorted(
        f"{i.path.relative_to(ROOT)}:{i.line}"
        for i in imports(modules())
        if i.target == "pyspark" and component(i.module) not in PYSPARK_IMPORTERS
    )
    assert not found, f"pyspark imported below spark: {found}"


def test_the_tier_imports_deltalake_from_one_module():
    # DESIGN D17: `storage.remote.table` is the remote tier's one deltalake importer; the
    # broker reaches it through `broker.remote_tables` (late), never deltalake directly
    tier = ("sparklog.storage.remote", "sparklog.broker")
    found = sorted(
        f"{i.path.relative_to(ROOT)}:{i.line}"
        for i in imports(modules())
        if i.target == "deltalake"
        and i.module.startswith(tier)
        and i.module != "sparklog.storage.remote.table"
    )
    assert not found, f"deltalake imported by the tier outside storage/remote/table.py: {found}"


def test_the_root_package_loads_nothing_at_import():
    # every `import sparklog.x` runs sparklog/__init__.py first: at module level it may import
    # only lazy_names (its functions import spark when called), or every module would load spark
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    top_level = [
        node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]
    assert [m for m in top_level if m and m.startswith("sparklog")] == ["sparklog.lazy_names"]


def test_the_checker_names_an_offending_import(tmp_path, monkeypatch):
    package = tmp_path / "sparklog"
    for name, text in {
        "__init__.py": "",
        "broker/__init__.py": "",
        "broker/server.py": "import os\n\nfrom sparklog.metadata import image\n",
        "broker/apis.py": "\n\ndef f():\n    from sparklog.controller.image import X\n",
        "controller/__init__.py": "",
        "controller/image.py": "",
        "metadata/__init__.py": "from sparklog.controller import image\n",
        "metadata/image.py": "",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    violations = layering_violations(modules())
    assert len(violations) == 2, "\n".join(violations)
    # a lazy import inside a function counts, with its line
    assert violations[0].startswith("sparklog/broker/apis.py:4 imports sparklog.controller.image:")
    assert "broker may import errors, lazy_names, metadata, metrics, protocol" in violations[0]
    assert "controller may be imported by cli, cluster, oracle, spark" in violations[0]
    # a floor package's face that imports a peer is named where it does (broker/server.py,
    # which imports that face, passes: each file answers for its own imports)
    assert violations[1].startswith(
        "sparklog/metadata/__init__.py:1 imports sparklog.controller.image:"
    )


def _loaded_after(code: str) -> set[str]:
    """The sparklog modules a fresh interpreter has loaded after running `code`."""
    code += "\nimport sys\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'sparklog'))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


def test_package_faces_load_nothing_until_a_name_is_used():
    # importing a package (which every import of one of its modules does first) runs only its
    # face; the CLI's package is its entry point and loads its commands
    packages = sorted(
        module_name(p) for p in PACKAGE.rglob("__init__.py") if component(module_name(p)) != "cli"
    )
    loaded = _loaded_after("\n".join(f"import {p}" for p in packages))
    assert loaded == {*packages, "sparklog.lazy_names"}


def test_every_name_of_a_lazy_face_loads():
    for path in sorted(PACKAGE.rglob("__init__.py")):
        face = importlib.import_module(module_name(path))
        lazy = getattr(face, "_MODULES", None)
        if lazy is None:
            continue
        assert set(face.__all__) == set(lazy), face.__name__
        for name in face.__all__:
            assert getattr(face, name) is not None, f"{face.__name__}.{name}"


def test_a_broker_module_does_not_load_the_servers():
    # 94 modules on 075fe11, the broker's face dragging in its server, the controller and the
    # coordinator; the partition itself needs neither
    loaded = _loaded_after("import sparklog.broker.partition")
    assert not {m for m in loaded if component(m) in {"controller", "coordinator"}}
    assert "sparklog.broker.server" not in loaded
