"""MkDocs hook: the settings reference page's table is generated from ``prag_models/config`` at build time.

A page containing ``<!-- settings-table -->`` gets one table per settings section: each field, its default, its
environment variable and the comment written next to it in the source, so the reference cannot drift from the code.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- settings-table -->"


def _comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class source: the ``#`` lines just above it plus its trailing comment."""
    lines, _ = inspect.getsourcelines(cls)
    tree = ast.parse(inspect.getsource(cls))
    out: dict[str, str] = {}
    for node in tree.body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#:").strip())
            i -= 1
        last = lines[node.end_lineno - 1]
        trailing = last.split("  # ", 1)[1].strip() if "  # " in last else ""
        out[node.target.id] = " ".join(t for t in (*above, trailing) if t and not t.startswith("fmt:"))
    return out


def _default(value: Any) -> str:
    """A default as it would be written in prag.toml."""
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


def settings_tables() -> str:
    """Markdown: one table per section of :class:`Settings`, fields in source order."""
    sys.path.insert(0, str(ROOT))
    from prag_models.config.settings import Settings

    parts = ["| setting | default | meaning |", "|---|---|---|",
             "| `home` | `\"\"` | all state: DuckDB file, Dagster storage, MLflow store (`PRAG_HOME`; `./.prag`) |"]
    for section, field in Settings.model_fields.items():
        cls = field.annotation
        if not isinstance(cls, type) or not hasattr(cls, "model_fields"):
            continue
        instance = cls()
        comments = _comments(cls)
        doc = " ".join((cls.__doc__ or "").split())
        parts += ["", f"### `[{section}]`", "", doc, "", "| setting | default | meaning |", "|---|---|---|"]
        for name in cls.model_fields:
            meaning = comments.get(name, "").replace("|", "\\|")
            parts.append(f"| `{section}.{name}` | `{_default(getattr(instance, name))}` | {meaning} |")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker by the generated tables."""
    return markdown.replace(MARKER, settings_tables()) if MARKER in markdown else markdown
