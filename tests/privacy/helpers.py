"""Helpers of the privacy tests: markers planted in a demo's LaMP-2 documents, and the sharing choices beside them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

#: The marker a hidden document carries: unique to its owner, so any text that holds one names whose it is.
MARK = re.compile(r"zqmark(u\d{4})q")


def edit_questions(root: Path, edit: Callable[[dict, dict], None]) -> None:
    """Apply ``edit(question, side)`` to every LaMP-2 train and dev question of a demo folder (rewritten in place),
    then write ``side`` (what the edits put in {"users", "private_documents"}) as the folder's sharing.json."""
    side: dict = {"users": {}, "private_documents": []}
    for split in ("train", "dev"):
        path = root / "LaMP_2_time" / split / f"{split}_questions.json"
        questions = json.loads(path.read_text(encoding="utf-8"))
        for q in questions:
            edit(q, side)
        path.write_text(json.dumps(questions), encoding="utf-8")
    (root / "sharing.json").write_text(json.dumps(side), encoding="utf-8")


def mark(doc: dict, user: str, hidden: dict[str, set[str]]) -> None:
    """Plant the owner's marker in a hidden profile document and add it to ``hidden`` (owner -> doc ids)."""
    doc["description"] = f"{doc['description']} zqmark{user}q"
    hidden.setdefault(user, set()).add(str(doc["id"]))
