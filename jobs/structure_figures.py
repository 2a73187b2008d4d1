"""Structure figures of a checkout: the shared-vocabulary and layering counts of issue 28.

    python jobs/structure_figures.py [REPO_DIR]

Prints one line per figure, measured from the source text (nothing of the project is
imported except for the module-count figure, which starts one Python process). The
figures: `TopicPartition` definitions; integer constants defined under the same name in
more than one module (the sentinels: EARLIEST/LATEST, NO_PRODUCER_ID, ...); raw numeric
error codes outside `errors.py`; file pairs importing across the three peers (broker,
controller, coordinator) and the other forbidden directions; modules loaded by
`import sparklog.broker.partition`; `throttle_time_ms` literals; outbound-connection
call sites; annotations naming `Any`; modules over 600 lines; loggers named `log`.
"""

from __future__ import annotations

import ast
import collections
import re
import subprocess
import sys
from pathlib import Path

PEERS = ("broker", "controller", "coordinator")
# (importer package, imported package) pairs that must not exist, besides peer pairs
OTHER_FORBIDDEN = (("protocol", "storage"), ("spark", "oracle"))
# a number where an error code is compared or set: `error_code=119`, `error == 0`, `code in (0, ...`
RAW_ERROR_CODE = re.compile(
    r"\b(?:error_code|error|err|code)\s*(?:==|!=)\s*-?\d+\b|\berror_code\s*=\s*-?\d+\b|"
    r"\b(?:error_code|error|code)\s+in\s+[(\[{]\s*-?\d"
)
THROTTLE_LITERAL = re.compile(
    r"""throttle_time(?:_ms)?["']?\s*[:=]\s*0\b|pack\(0\)\s*#\s*throttle"""
)
OUTBOUND = re.compile(
    r"asyncio\.open_connection\(|socket\.create_connection\(|\bAsyncKafkaConnection\(|"
    r"\bKafkaConnection\(|\.connect\(\(|loop\.create_connection\("
)


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((root / "sparklog").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.append((node.lineno, full if full in known else base))
    return [(line, target) for line, target in out if target.startswith("sparklog")]


def top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def cross_pairs(root: Path) -> collections.Counter[str]:
    known = modules(root)
    pairs: set[tuple[str, str]] = set()
    for name, path in known.items():
        for _, target in imports_of(name, path, known):
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            a, b = top(name), top(target)
            forbidden = (a in PEERS and b in PEERS and a != b) or (a, b) in OTHER_FORBIDDEN
            if forbidden:
                pairs.add((name, target))
    return collections.Counter(f"{top(a)}->{top(b)}" for a, b in pairs)


def duplicate_constants(root: Path) -> tuple[int, int]:
    where: dict[str, set[str]] = collections.defaultdict(set)
    for name, path in modules(root).items():
        for node in ast.parse(path.read_text()).body:  # module level: enum members differ
            targets = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            if isinstance(value if targets else None, ast.UnaryOp):
                value = value.operand  # -1
            for target in targets:
                if (
                    isinstance(target, ast.Name)
                    and re.fullmatch(r"[A-Z][A-Z0-9_]+", target.id)
                    and isinstance(value, ast.Constant)
                    and type(value.value) is int
                ):
                    where[target.id].add(name)
    repeated = {k: v for k, v in where.items() if len(v) > 1}
    return len(repeated), sum(len(v) for v in repeated.values())


def any_annotations(path: Path) -> int:
    count = 0
    for node in ast.walk(ast.parse(path.read_text())):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs
            every += [a for a in (args.vararg, args.kwarg) if a]
            annotations = [a.annotation for a in every] + [node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        for annotation in annotations:
            if annotation is not None and re.search(r"\bAny\b", ast.unparse(annotation)):
                count += 1
    return count


def loaded_by_partition(root: Path) -> int:
    code = "import sys, sparklog.broker.partition; print(sum(m.startswith('sparklog') for m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={"PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )
    return int(result.stdout.strip()) if result.returncode == 0 else -1


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    files = modules(root)
    texts = {name: path.read_text() for name, path in files.items()}
    tp = sum(
        len(re.findall(r"^\s*(?:class TopicPartition\b|TopicPartition\s*=)", t, re.M))
        for t in texts.values()
    )
    raw = [m for n, t in texts.items() if n != "sparklog.errors" for m in RAW_ERROR_CODE.findall(t)]
    nonzero = [m for m in raw if re.search(r"[1-9]", m)]
    names, definitions = duplicate_constants(root)
    pairs = cross_pairs(root)
    long = sorted((len(t.splitlines()), n) for n, t in texts.items() if len(t.splitlines()) > 600)
    figures = {
        "TopicPartition definitions": tp,
        "module-level int constants defined in >1 module (names/definitions)": f"{names}/{definitions}",
        "raw numeric error codes outside errors.py (of them not 0)": f"{len(raw)} ({len(nonzero)})",
        "cross-peer file pairs": f"{sum(pairs.values())} {dict(sorted(pairs.items()))}",
        "modules loaded by import sparklog.broker.partition": loaded_by_partition(root),
        "originals.get reads": sum(t.count("originals.get(") for t in texts.values()),
        "throttle_time_ms literal zeros": sum(
            len(THROTTLE_LITERAL.findall(t)) for t in texts.values()
        ),
        "outbound-connection call sites": sum(len(OUTBOUND.findall(t)) for t in texts.values()),
        "annotations naming Any": sum(any_annotations(p) for p in files.values()),
        "modules over 600 lines": f"{len(long)} {[f'{n} {c}' for c, n in reversed(long)]}",
        "loggers named log": sum(
            bool(re.search(r"^log = logging\.getLogger", t, re.M)) for t in texts.values()
        ),
        "errors.py classes made with type()": texts.get("sparklog.errors", "").count("type("),
        "python modules / lines": f"{len(files)} / {sum(len(t.splitlines()) for t in texts.values())}",
    }
    for key, value in figures.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
