"""Every relative link and image in README.md and docs/*.md points at a file of the repository (and an
anchor, where one is given, at a heading of that file): a moved doc or a link out of the checkout
(``../../fixtures/...``) fails here instead of in a newcomer's browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) and ![alt](target); code spans are removed first so `[x](y)` in code is not a link.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def links(doc: Path) -> list[str]:
    return LINK.findall(CODE.sub("", doc.read_text()))


def anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def broken(doc: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: — not checked offline
            continue
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.is_relative_to(root):
            problems.append(f"{target}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: {dest.name} has no heading #{anchor}")
    return problems


def test_the_docs_exist() -> None:
    assert (ROOT / "docs").is_dir() and len(DOCS) > 1


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    assert broken(doc) == []


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    """The checker itself: an out-of-tree link, a missing file and a missing anchor are all reported."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Two commands\n")
    doc = tmp_path / "docs" / "probe.md"
    doc.write_text(
        "[a](../../fixtures/x.yaml) [b](nope.md) [c](../README.md#no-such-heading) `[d](e.md)`"
        " [ok](../README.md#two-commands)\n"
    )
    assert [p.split(":")[1].strip() for p in broken(doc, tmp_path)] == [
        "points outside the repository",
        "no such file",
        "README.md has no heading #no-such-heading",
    ]


def test_readme_is_a_front_door() -> None:
    """Issue 21: at most 300 lines, and the picture it shows is committed."""
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 300
    assert "docs/architecture.png" in links(readme)
