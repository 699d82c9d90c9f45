"""The README and docs/: every relative link resolves, and the README stays an entry point.

Links are checked as GitHub renders them: a relative target is resolved against the
linking file's folder, and a ``#anchor`` into a markdown file must name one of its
headings by GitHub's slug (lower case; punctuation other than ``-`` and ``_`` dropped;
spaces become ``-``; a repeated heading gets ``-1``, ``-2``, ...).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

MAX_README_LINES = 260
FIRST_LINES = 40

# [text](target) or [text](target "title"); images too. Reference-style links are
# not used in these pages.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"`[^`]*`")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.replace("`", "").strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        result.add(slug)
    return result


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every relative link in prose (not in code)."""
    links = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_INLINE_CODE.sub("", line)):
            target = match.group(1)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            links.append((number, target))
    return links


def broken_links(path: Path) -> list[str]:
    """What is wrong with each relative link of ``path`` (empty when all resolve)."""
    problems = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not linked.exists():
            problems.append(f"{where}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading with anchor #{anchor} in {linked.name}")
    return problems


def test_docs_pages_exist():
    names = {p.name for p in DOCS}
    assert {"method.md", "environments.md", "results.md", "scaling.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert relative_links(page) or page != README, "the README links to nothing"
    assert broken_links(page) == []


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_starts_with_the_two_setup_commands():
    head = "\n".join(README.read_text(encoding="utf-8").splitlines()[:FIRST_LINES])
    for command in ("make demo", "make test"):
        assert command in head, f"`{command}` is not in the first {FIRST_LINES} lines of README.md"


def test_link_checker_catches_what_it_should(tmp_path, monkeypatch):
    """The checker itself can fail: a missing file and a missing heading are reported,
    while links in code and to existing headings (GitHub's slugs, repeats) are not."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "other.md").write_text("# Title\n## §3 MCTS with an AI critic\n## Notes\n## Notes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#3-mcts-with-an-ai-critic) [ok](other.md#notes-1) [ok](#own)\n"
        "[missing file](nope.md) [missing heading](other.md#4-nothing) [web](https://x.org/y)\n"
        "`[in code](ignored.md)`\n```\n[in a fence](ignored.md)\n```\n## Own\n"
    )
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "nope.md: no such file" in problems[0]
    assert "#4-nothing" in problems[1]


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("§1 Agent formulation", "1-agent-formulation"),
        ("Agent Q's result table on WebShop", "agent-qs-result-table-on-webshop"),
        ("TextCraft comparison (issue-14 protocol)", "textcraft-comparison-issue-14-protocol"),
        ("`make bench` and the table", "make-bench-and-the-table"),
        ("snake_case_key", "snake_case_key"),
    ],
)
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


# A repository file or folder the pages name in code spans (`agentq/loop.py`, `docs/`),
# outside links too; a gymnasium id such as `agentq/WebShop-v0` is neither.
_CODE_PATH = re.compile(r"`((?:agentq|envs|conf|tests|benchmarks|experiments)/[\w./-]*(?:\.\w+|/))`")


def stale_paths(page: Path) -> list[str]:
    """Repository paths named in ``page``'s code spans that do not exist (globs skipped)."""
    missing = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        for path in _CODE_PATH.findall(line):
            if not any(c in path for c in "*<>{}") and not (ROOT / path).exists():
                missing.append(f"{page.name}:{number}: {path}")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_repository_paths_exist(page):
    assert stale_paths(page) == []


def test_a_stale_path_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See `agentq/loop.py` and `agentq/data/revision.py`.\n")
    assert stale_paths(page) == ["page.md:1: agentq/data/revision.py"]
