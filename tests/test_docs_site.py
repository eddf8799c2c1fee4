"""The documentation site: every docs page the code, tests, scripts and README cite exists (citations go stale when
a page moves), every `prag` example of the site parses with the real CLI, and the README stays a short entry point."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_CITED = re.compile(r"\bdocs/[\w./-]+?\.md\b")
_PRAG_LINE = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+ )*prag( |$)")
_WHERE = ("prag_models", "prag_assets", "tests", "benchmarks", "scripts", ".ci")


def _citing_files() -> list[Path]:
    """Source, script and top-level files that may cite a docs page."""
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "mkdocs.yml", ROOT / "workspace.yaml"]
    for folder in _WHERE:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh", ".toml", ".yaml", "")
                  and p.is_file()]  # fmt: skip
    return [f for f in files if f.is_file()]


def test_every_cited_docs_page_exists() -> None:
    """A ``docs/<page>.md`` named anywhere in the code is a file of the site (after a move, one sed fixes them)."""
    missing = sorted({f"{f.relative_to(ROOT)}: {m}" for f in _citing_files()
                      for m in _CITED.findall(f.read_text(encoding="utf-8", errors="replace"))
                      if not (ROOT / m).is_file()})  # fmt: skip
    assert not missing, "cited docs pages that do not exist:\n" + "\n".join(missing)


_CODE_PATH = re.compile(r"\b(?:prag_models|prag_assets|tests|benchmarks|scripts|\.ci)/[\w./-]*\w")


def test_every_code_path_the_docs_name_exists() -> None:
    """A file or folder of the repository named in the README or a docs page exists (code moves leave no stale path)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    missing = sorted({f"{p.relative_to(ROOT)}: {m}" for p in pages for m in _CODE_PATH.findall(p.read_text("utf-8"))
                      if not (ROOT / m).exists()})  # fmt: skip
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_the_readme_is_short() -> None:
    """The README is an entry point of at most 150 lines; everything else is in the docs site."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines"


def _docs_commands() -> list[tuple[str, list[str]]]:
    """The ``prag`` command lines of the docs pages' fenced blocks, with the page they are on."""
    out = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        blocks = re.findall(r"^```\w*\s*$(.*?)^```\s*$", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        for line in re.sub(r"\\\n\s*", " ", "".join(blocks)).splitlines():
            if _PRAG_LINE.match(line.strip()):
                out.append((str(page.relative_to(ROOT)), shlex.split(line, comments=True)))
    return out


@pytest.mark.parametrize(("page", "words"), _docs_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_prag_command_of_the_docs_parses(page: str, words: list[str], monkeypatch) -> None:
    """The docs site's ``prag`` examples use subcommands, options and settings the CLI has (as the README's do)."""
    from test_readme_commands import test_every_prag_command_parses

    test_every_prag_command_parses(words, monkeypatch)
