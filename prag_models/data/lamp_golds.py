"""A LaMP outputs file: a split's gold outputs, validated, and the check that they match its questions (methods §1).

Strict (the default): any malformed gold, or question and gold ids that are not the same set, stops the load naming
the setting ``data.malformed``. Set aside: a malformed gold output drops its question; a gold without a usable id, a
repeated gold id or a gold without a question is dropped; a question without a gold output is dropped
(prag_models/data/set_aside.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prag_models.data.lamp_validation import LampRecordError, _as_id, _fail, _read_json, _record_id, _text, text_problem
from prag_models.data.set_aside import SETTING_HINT, stop_error
from prag_models.data.tasks import LABELS, LampDataError, task_from_name


@dataclass
class Golds:
    """The valid gold outputs of a file by sample id, and the malformed gold records left out (set aside only)."""

    path: Path
    outputs: dict[str, str] = field(default_factory=dict)
    # (record id or "#<index>", the error, whether it is the output of a gold with a usable id)
    flaws: list[tuple[str, LampRecordError, bool]] = field(default_factory=list)


def _gold(path: Path, task: str, i: int, gold: Any, out: dict[str, str]) -> tuple[str, str]:
    """One validated gold record as (id, output); LampRecordError naming its field."""
    where, gid = _record_id(path, gold, i, "gold")
    if "output" not in gold:
        raise _fail(path, where, "output", "is missing")
    output = gold["output"]
    if task == "LaMP-3" and isinstance(output, int) and not isinstance(output, bool):
        output = str(output)
    if not isinstance(output, str):
        raise _fail(path, where, "output", f"wrong type {type(output).__name__}")
    _text(path, where, "output", output)
    labels = LABELS.get(task)
    if labels is not None and output.strip() not in labels:
        raise _fail(path, where, "output", f"{output!r} is not a {task} label {list(labels)}")
    if gid in out:
        raise _fail(path, where, "id", "duplicate gold id")
    return gid, output.strip() if labels is not None else output


def load_golds(path: Path, task: str, lenient: bool = False) -> Golds:
    """Read and validate an outputs file: ``{"task": "LaMP_X", "golds": [{"id", "output"}]}``; ``lenient``: a
    malformed gold record is left out (``Golds.flaws``) instead of stopping the load."""
    data = _read_json(path)
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise _fail(path, "top level", "<root>", f"must be an object with 'task' and 'golds', got {kind}")
    if "task" not in data:
        raise _fail(path, "top level", "task", "is missing")
    try:
        file_task = task_from_name(data["task"]) if isinstance(data["task"], str) else None
    except LampDataError:
        file_task = None
    if file_task != task:
        raise _fail(path, "top level", "task", f"is {data['task']!r}, expected {task} (e.g. 'LaMP_{task[5:]}')")
    records = data.get("golds")
    if not isinstance(records, list):
        raise _fail(path, "top level", "golds", f"must be a list, got {type(records).__name__}")
    golds = Golds(path)
    for i, gold in enumerate(records):
        try:
            gid, output = _gold(path, task, i, gold, golds.outputs)
        except LampRecordError as exc:
            if not lenient:
                raise stop_error(exc) from None
            gid = _as_id(gold.get("id")) if isinstance(gold, dict) else None
            usable = gid is not None and text_problem(gid) is None
            golds.flaws.append((gid if usable else f"#{i}", exc, usable and exc.field != "id"))
            continue
        golds.outputs[gid] = output
    return golds


def check_ids(qpath: Path, opath: Path, question_ids: set[str], gold_ids: set[str]) -> None:
    """Fail when the question ids and the gold ids are not the same set (counts and a few examples)."""
    no_gold = sorted(question_ids - gold_ids)
    no_question = sorted(gold_ids - question_ids)
    if not no_gold and not no_question:
        return
    parts = []
    if no_gold:
        parts.append(f"{len(no_gold)} question id(s) without a gold output (e.g. {', '.join(no_gold[:5])})")
    if no_question:
        parts.append(f"{len(no_question)} gold id(s) without a question (e.g. {', '.join(no_question[:5])})")
    raise LampDataError(f"{qpath} vs {opath}: record ids: field 'id': ids do not match: {'; '.join(parts)} — "
                        f"{SETTING_HINT}")  # fmt: skip
