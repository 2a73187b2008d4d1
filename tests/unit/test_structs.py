"""Shared vocabulary has one home: nothing under sparklog/ defines a name `sparklog.structs`
defines (TopicPartition was defined 12 times and the sentinels 31 times before)."""

from __future__ import annotations

import ast
from pathlib import Path

from sparklog import structs
from sparklog.structs import IsolationLevel, TopicPartition

SPARKLOG = Path(structs.__file__).resolve().parent
SHARED = frozenset(n for n in vars(structs) if n[:1].isupper() and not n.startswith("NamedTuple"))


def redefinitions(root: Path = SPARKLOG) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "structs.py":
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            for name in set(names) & SHARED:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {name}")
    return found


def test_each_struct_and_sentinel_is_defined_once():
    found = redefinitions()
    assert not found, "defined again outside sparklog/structs.py (import it):\n" + "\n".join(found)


def test_topic_partition_is_a_plain_pair_for_keys_and_order():
    tp = TopicPartition("t", 1)
    assert tp == ("t", 1) and hash(tp) == hash(("t", 1)) and {("t", 1): 5}[tp] == 5
    assert sorted([TopicPartition("b", 0), ("a", 2), TopicPartition("a", 1)]) == [
        ("a", 1),
        ("a", 2),
        ("b", 0),
    ]
    assert (tp.topic, tp.partition) == ("t", 1)


def test_isolation_level_compares_with_the_wire_int():
    assert (
        IsolationLevel.READ_COMMITTED == 1 and IsolationLevel(0) is IsolationLevel.READ_UNCOMMITTED
    )
