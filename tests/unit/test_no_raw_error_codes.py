"""No numeric Kafka error code outside `sparklog/errors.py`.

A raw number on an error field is a bug waiting to happen: a raw 119 (INVALID_REGISTRATION) once
answered DescribeCluster where Kafka sends 114 (MISMATCHED_ENDPOINT_TYPE). Code says
`UnknownTopicOrPartitionError.code` instead. This test reads every module's syntax tree and
names each `file:line` where a non-zero integer literal sits on an error field:

- compared with a name like `code`, `error`, `error_code` (`code == 25`, `code in (5, 6)`);
- passed or stored as one (`error_code=119`, `{"error_code": 3}`, `answer["error_code"] = 14`,
  `code = 22`), or collected in a set of codes (`REFRESH_ERROR_CODES = frozenset({3, 5})`);
- looked up (`error_for_code(27)`, `create_errors.get(name, 3)`);
- in a constant that an error field is tested against (`_GONE = {14, 15}` ... `code in _GONE`);
- named like Kafka's error (`UNKNOWN_PRODUCER_ID = 59`), or explained by a comment that names
  one (`_REJOIN = {22, 25}  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID`).

0 (Kafka's NONE) is allowed: "no error" reads better as 0 than as a class. A literal that merely
looks like an error code says so with a `# not an error code` comment on its line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sparklog import errors

SPARKLOG = Path(errors.__file__).resolve().parent
_FIELD = re.compile(r"(^|_)(code|codes|error|err|errors|error_code|error_codes)$", re.IGNORECASE)
_KAFKA_NAMES = frozenset(errors.BY_NAME)
_COMMENT_NAMES = re.compile(r"#.*\b(" + "|".join(sorted(_KAFKA_NAMES, key=len)[::-1]) + r")\b")
_EXEMPT = "not an error code"


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value if isinstance(node.slice.value, str) else None
    if isinstance(node, ast.Call):
        return _name(node.func)
    return None


def _is_field(node: ast.AST) -> bool:
    name = _name(node)
    return bool(name and _FIELD.search(name))


def _ints(node: ast.AST | None) -> list[int]:
    """Non-zero integer literals in `node`: a literal, or a tuple/set/list/frozenset() of them."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value] if node.value else []
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [-v for v in _ints(node.operand)]
    if isinstance(node, ast.Tuple | ast.Set | ast.List):
        return [v for e in node.elts for v in _ints(e)]
    if isinstance(node, ast.Call) and _name(node.func) in ("frozenset", "set", "tuple"):
        return _ints(node.args[0]) if node.args else []
    return []


def _raw_codes(node: ast.AST) -> list[tuple[int, int]]:
    """(line, code) for each raw error code `node` itself holds."""
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if any(_is_field(s) for s in sides):
            return [(line, v) for s in sides for v in _ints(s)]
    elif isinstance(node, ast.keyword) and node.arg and _FIELD.search(node.arg):
        return [(line, v) for v in _ints(node.value)]
    elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = _name(target) or ""
            scalar = isinstance(node.value, ast.Constant | ast.UnaryOp)
            if name in _KAFKA_NAMES or (_FIELD.search(name) and (not scalar or "code" in name)):
                return [(line, v) for v in _ints(node.value)]
    elif isinstance(node, ast.Dict):
        return [
            (value.lineno, v)
            for k, value in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and _FIELD.search(k.value)
            for v in _ints(value)
        ]
    elif isinstance(node, ast.Call) and node.args:
        if _name(node.func) == "error_for_code":
            return [(line, v) for v in _ints(node.args[0])]
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get" and _is_field(func.value):
            return [(line, v) for a in node.args[1:] for v in _ints(a)]
    return []


def raw_error_codes(root: Path = SPARKLOG) -> list[str]:
    """`path:line: codes  source line` for every raw error code under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "errors.py":
            continue
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, str(path))
        hits: dict[int, list[int]] = {}
        for node in ast.walk(tree):
            for number, code in _raw_codes(node):
                hits.setdefault(number, []).append(code)
        for number, codes in _code_sets(tree).items():
            hits.setdefault(number, []).extend(codes)
        for number, line in enumerate(lines, 1):
            if _COMMENT_NAMES.search(line) and _ints_in_code(line):
                hits.setdefault(number, []).extend(_ints_in_code(line))
        for number, codes in sorted(hits.items()):
            if _EXEMPT not in lines[number - 1]:
                where = path.relative_to(root.parent)
                found.append(f"{where}:{number}: {sorted(set(codes))}  {lines[number - 1].strip()}")
    return found


def _code_sets(tree: ast.Module) -> dict[int, list[int]]:
    """Module constants holding literal ints that an error field is tested against
    (`_GONE = {14, 15}` ... `if code in _GONE`): line -> the ints."""
    literal_sets = {
        target.id: (node.lineno, _ints(node.value))
        for node in tree.body
        if isinstance(node, ast.Assign) and not isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and _ints(node.value)
    }
    found: dict[int, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _is_field(node.left):
            for side in node.comparators:
                if isinstance(side, ast.Name) and side.id in literal_sets:
                    number, codes = literal_sets[side.id]
                    found[number] = codes
    return found


def _ints_in_code(line: str) -> list[int]:
    code = line.split("#", 1)[0]
    return [int(n) for n in re.findall(r"(?<![\w.])[1-9]\d{0,2}(?![\w.])", code)]


def test_no_raw_error_codes_outside_errors_py():
    found = raw_error_codes()
    assert not found, (
        "raw Kafka error codes outside sparklog/errors.py (use e.g. "
        "UnknownTopicOrPartitionError.code):\n" + "\n".join(found)
    )


def test_the_scan_finds_each_pattern(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "errors.py").write_text("X = 3\n")  # the one home of codes is not scanned
    (pkg / "bad.py").write_text(
        "if code == 25: pass\n"
        "respond(error_code=119)\n"
        "answer['error_code'] = 14\n"
        "RETRY_CODES = frozenset({7, 14})\n"
        "raise error_for_code(27)('x')\n"
        "c = create_errors.get(name, 3)\n"
        "UNKNOWN_PRODUCER_ID = 59\n"
        "_REJOIN = {22, 25}  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID\n"
        "ok = error_code == 0 or count == 3\n"
        "SIZES = {'error_code': 2}  # bytes, not an error code\n"
        "_GONE = {14, 15}\n"
        "gone = code in _GONE\n"
    )
    found = raw_error_codes(pkg)
    assert [int(f.split(":")[1]) for f in found] == [*range(1, 9), 11], found
