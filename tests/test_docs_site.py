"""The documentation site: every cited docs page the code, tests, scripts and README cite exists (citations go
stale when a page moves), and the README stays a short entry point (the long material lives in the MkDocs site)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_CITED = re.compile(r"\bdocs/[\w./-]+?\.md\b")
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


def test_the_readme_is_short() -> None:
    """The README is an entry point of at most 150 lines; everything else is in the docs site."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines"
