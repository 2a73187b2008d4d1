"""Every relative link in README.md and docs/*.md resolves inside the repository: the file
exists, and an anchor names a heading of that file (GitHub's slugs), so a reader following the
docs never lands on a missing page or section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to
    hyphens (hyphens and underscores kept)."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    return LINK.findall(text)


def broken(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.is_relative_to(ROOT) or not dest.exists():
            bad.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc):
    assert links(doc) or doc.name != "README.md"
    assert broken(doc) == [], f"broken links in {doc.relative_to(ROOT)}"


def test_the_checker_sees_a_missing_file_and_a_missing_anchor(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# A title\n## Where `data` lives, and why\n")
    doc = tmp_path / "b.md"
    doc.write_text(
        "[ok](a.md#where-data-lives-and-why) [self](#top) [gone](c.md) [bad](a.md#nope)\n"
        "# Top\n```\n[in code](missing.md)\n```\n[web](https://example.com)\n"
    )
    assert broken(doc) == [
        "c.md: no such file in the repository",
        "a.md#nope: no heading with that anchor in a.md",
    ]
