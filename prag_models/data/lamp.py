"""LaMP loader with strict validation (docs/methods.md §1).

Every ``LampDataError`` message has the form ``<file>: <record>: field '<name>': <problem>`` where ``<record>`` is
``record id '<id>'`` or ``record #<index>`` when the id itself is missing or unusable. Besides types and labels,
every id and text must be encodable as UTF-8 without NUL characters (no lone surrogates such as ``"\\ud800"``), a
question list must not be empty, a sample id may appear in only one split of a task, and a profile date must be in
one of the accepted formats (``parse_date``): an unparseable date fails unless ``undated = "keep"`` (then the document
is undated, sorted last); a document without a date is undated. ``undated_documents`` counts them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from prag_models.data.dates import parse_date
from prag_models.data.tasks import (
    LABELS,
    PROFILE_FIELDS,
    TASKS,
    LampDataError,
    extract_query,
    render_document,
    task_from_name,
)

__all__ = [
    "TASKS",
    "LampDataError",
    "LampSample",
    "ProfileDoc",
    "derive_user_id",
    "lamp_split_paths",
    "load_lamp_split",
    "load_lamp_task",
    "parse_date",
    "task_from_name",
    "undated_documents",
]
UNDATED_POLICIES = ("error", "keep")
VISIBILITIES = ("shared", "private")  # a profile document's optional visibility (prag_models.data.sharing)


@dataclass(frozen=True)
class ProfileDoc:
    """One profile document: its id, raw date string, task fields and rendered text."""

    doc_id: str
    date: str | None
    fields: dict[str, str]
    text: str
    visibility: str | None = None  # "shared" | "private" when the record states it (docs/privacy.md)


@dataclass(frozen=True)
class LampSample:
    """One LaMP question with its user, retrieval query, gold output (None when unlabeled) and sorted profile."""

    task: str
    split: str
    sample_id: str
    user_id: str
    input: str
    query: str
    gold: str | None
    profile: tuple[ProfileDoc, ...]
    share: bool | None = None  # the user's sharing consent when the record states it (docs/privacy.md)
    derived_user_id: bool = False  # True when user_id was derived from the profile (original split, no user_id)


#: Profile fields that carry the task's label: a LaMP-2 tag, a LaMP-3 score (1–5); anything else is an error.
PROFILE_LABELS: dict[tuple[str, str], tuple[str, ...]] = {
    ("LaMP-2", "tag"): LABELS["LaMP-2"],
    ("LaMP-3", "score"): LABELS["LaMP-3"],
}


def derive_user_id(doc_ids: Iterable[str]) -> str:
    """Stable user id for the original split: "p" + first 12 hex of sha1 over the sorted profile doc ids."""
    digest = hashlib.sha1("\n".join(sorted(doc_ids)).encode("utf-8")).hexdigest()
    return "p" + digest[:12]


def _printable(text: str) -> str:
    """The text with lone surrogates and NUL escaped (``\\ud800``, ``\\x00``), so that a message can be printed."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _fail(path: Path, where: str, field: str, problem: str) -> LampDataError:
    """Build the error with the standard ``file: record: field: problem`` message (always printable)."""
    return LampDataError(_printable(f"{path}: {where}: field '{field}': {problem}"))


def text_problem(value: str) -> str | None:
    """Why a string cannot be stored as text (a NUL character, a lone surrogate), or None when it can."""
    if "\x00" in value:
        return f"contains a NUL character at position {value.index(chr(0))}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        return f"contains a lone surrogate U+{code:04X} at position {exc.start} (not encodable as UTF-8)"
    return None


def _text(path: Path, where: str, field: str, value: str) -> str:
    """The value, or a LampDataError when it cannot be stored as text."""
    problem = text_problem(value)
    if problem is not None:
        raise _fail(path, where, field, problem)
    return value


def _read_json(path: Path) -> Any:
    """Read a UTF-8 JSON file, turning every failure into a LampDataError that names the file."""
    if not path.is_file():
        raise LampDataError(f"{path}: file not found")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start]
        raise LampDataError(f"{path}: not valid UTF-8: byte 0x{bad:02x} at byte offset {exc.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LampDataError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def _as_id(value: Any) -> str | None:
    """A JSON id as a non-empty string (ints allowed), or None when it is not usable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _record(obj: Any, index: int, what: str = "record") -> str:
    """How an error message refers to a record: by id when it has one, else by index."""
    rid = _as_id(obj.get("id")) if isinstance(obj, dict) else None
    return f"{what} id '{rid}'" if rid is not None and text_problem(rid) is None else f"{what} #{index}"


def _field_text(task: str, name: str, value: Any) -> str | None:
    """A profile field value as text; numbers are accepted for the LaMP-3 score only."""
    if isinstance(value, str):
        return value
    if task == "LaMP-3" and name == "score" and not isinstance(value, bool):
        if isinstance(value, int):
            return str(value)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
    return None


def check_date(path: Path, where: str, field: str, date: Any, undated: str) -> str | None:
    """A document's date as text (None when it has none); LampDataError for a wrong type, a text that cannot be
    stored, or a date in no accepted format unless the policy is ``keep``."""
    if date is None:
        return None
    if isinstance(date, bool) or not isinstance(date, str | int):
        raise _fail(path, where, field, f"wrong type {type(date).__name__}")
    text = _text(path, where, field, str(date))
    if undated != "keep" and parse_date(text) is None:
        problem = f'{text!r} is not a date in an accepted format (set data.undated = "keep" to keep it undated)'
        raise _fail(path, where, field, problem)
    return text


def undated_documents(samples: Iterable[LampSample]) -> int:
    """How many distinct (user, document) pairs of these samples have no parseable date (in any listing)."""
    return len({(s.user_id, d.doc_id) for s in samples for d in s.profile if parse_date(d.date) is None})


def _profile(path: Path, where: str, task: str, docs: Any, undated: str = "error") -> tuple[ProfileDoc, ...]:
    """Validate one question's profile and return it sorted by date (stable; undated docs last)."""
    if not isinstance(docs, list):
        raise _fail(path, where, "profile", f"must be a list, got {type(docs).__name__}")
    if not docs:
        raise _fail(path, where, "profile", "is empty")
    out: list[ProfileDoc] = []
    seen: set[str] = set()
    for j, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise _fail(path, where, f"profile[{j}]", f"must be an object, got {type(doc).__name__}")
        doc_id = _as_id(doc.get("id"))
        if doc_id is None:
            problem = "is missing" if "id" not in doc else f"must be a non-empty string or int, got {doc['id']!r}"
            raise _fail(path, where, f"profile[{j}].id", problem)
        _text(path, where, f"profile[{j}].id", doc_id)
        if doc_id in seen:
            raise _fail(path, where, f"profile[{j}].id", f"duplicate document id '{doc_id}' in this profile")
        seen.add(doc_id)
        fields: dict[str, str] = {}
        for name in PROFILE_FIELDS[task]:
            if name not in doc:
                raise _fail(path, where, f"profile doc '{doc_id}'.{name}", f"missing {task} field")
            value = _field_text(task, name, doc[name])
            if value is None:
                raise _fail(path, where, f"profile doc '{doc_id}'.{name}", f"wrong type {type(doc[name]).__name__}")
            _text(path, where, f"profile doc '{doc_id}'.{name}", value)
            allowed = PROFILE_LABELS.get((task, name))
            if allowed is not None and value.strip() not in allowed:
                problem = f"{value!r} is not a {task} label {list(allowed)}"
                raise _fail(path, where, f"profile doc '{doc_id}'.{name}", problem)
            fields[name] = value
        date = check_date(path, where, f"profile doc '{doc_id}'.date", doc.get("date"), undated)
        visibility = doc.get("visibility")
        if visibility is not None and visibility not in VISIBILITIES:
            problem = f"{visibility!r} is not one of {list(VISIBILITIES)}"
            raise _fail(path, where, f"profile doc '{doc_id}'.visibility", problem)
        out.append(ProfileDoc(doc_id, date, fields, render_document(task, fields), visibility))
    parsed = [parse_date(d.date) for d in out]
    order = sorted(range(len(out)), key=lambda i: (0, parsed[i], i) if parsed[i] is not None else (1, datetime.min, i))
    return tuple(out[i] for i in order)


def _golds(path: Path, task: str) -> dict[str, str]:
    """Read and validate an outputs file: ``{"task": "LaMP_X", "golds": [{"id", "output"}]}``."""
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
    golds = data.get("golds")
    if not isinstance(golds, list):
        raise _fail(path, "top level", "golds", f"must be a list, got {type(golds).__name__}")
    out: dict[str, str] = {}
    labels = LABELS.get(task)
    for i, gold in enumerate(golds):
        where = _record(gold, i, "gold")
        if not isinstance(gold, dict):
            raise _fail(path, where, "<record>", f"must be an object, got {type(gold).__name__}")
        gid = _as_id(gold.get("id"))
        if gid is None:
            raise _fail(path, where, "id", "is missing" if "id" not in gold else f"bad id {gold['id']!r}")
        _text(path, where, "id", gid)
        if "output" not in gold:
            raise _fail(path, where, "output", "is missing")
        output = gold["output"]
        if task == "LaMP-3" and isinstance(output, int) and not isinstance(output, bool):
            output = str(output)
        if not isinstance(output, str):
            raise _fail(path, where, "output", f"wrong type {type(output).__name__}")
        _text(path, where, "output", output)
        if labels is not None and output.strip() not in labels:
            raise _fail(path, where, "output", f"{output!r} is not a {task} label {list(labels)}")
        if gid in out:
            raise _fail(path, where, "id", "duplicate gold id")
        out[gid] = output.strip() if labels is not None else output
    return out


def load_lamp_split(
    questions_path: str | Path,
    outputs_path: str | Path | None,
    task: str,
    split: str,
    undated: str = "error",
    derive_user_ids: bool = False,
) -> list[LampSample]:
    """Load and validate one split (questions + optional outputs); LampDataError on any malformed input.

    ``undated``: what an unparseable profile date does, ``error`` (the default) or ``keep`` (the document is undated).
    ``derive_user_ids``: a question without ``user_id`` gets an id derived from its profile (LaMP's original split
    has none) instead of failing; such samples say so (``derived_user_id``).
    """
    if undated not in UNDATED_POLICIES:
        raise ValueError(f"undated must be one of {list(UNDATED_POLICIES)}, got {undated!r}")
    qpath = Path(questions_path)
    try:
        task = task_from_name(task)
    except LampDataError as exc:
        raise LampDataError(f"{qpath}: {exc}") from None
    data = _read_json(qpath)
    if not isinstance(data, list):
        raise _fail(qpath, "top level", "<root>", f"must be a list of questions, got {type(data).__name__}")
    if not data:
        raise _fail(qpath, "top level", "<root>", "is an empty list (a split needs at least one question)")
    golds = _golds(Path(outputs_path), task) if outputs_path is not None else None
    samples: list[LampSample] = []
    seen: set[str] = set()
    for i, question in enumerate(data):
        where = _record(question, i)
        if not isinstance(question, dict):
            raise _fail(qpath, where, "<record>", f"must be an object, got {type(question).__name__}")
        sid = _as_id(question.get("id"))
        if sid is None:
            raise _fail(qpath, where, "id", "is missing" if "id" not in question else f"bad id {question['id']!r}")
        _text(qpath, where, "id", sid)
        if sid in seen:
            raise _fail(qpath, where, "id", "duplicate sample id")
        seen.add(sid)
        if "input" not in question:
            raise _fail(qpath, where, "input", "is missing")
        text = question["input"]
        if not isinstance(text, str):
            raise _fail(qpath, where, "input", f"wrong type {type(text).__name__}")
        if not text.strip():
            raise _fail(qpath, where, "input", "is empty")
        _text(qpath, where, "input", text)
        if "profile" not in question:
            raise _fail(qpath, where, "profile", "is missing")
        profile = _profile(qpath, where, task, question["profile"], undated)
        if question.get("user_id") is not None:
            user_id = _as_id(question["user_id"])
            if user_id is None:
                raise _fail(qpath, where, "user_id", f"must be a non-empty string or int, got {question['user_id']!r}")
            _text(qpath, where, "user_id", user_id)
        elif derive_user_ids:
            user_id = derive_user_id(d.doc_id for d in profile)
        else:  # a derived id would cut the user from his other questions and his neighbours
            raise _fail(qpath, where, "user_id", "is missing (a time split names each question's user)")
        gold = golds.get(sid) if golds is not None else None
        share = question.get("share")
        if share is not None and not isinstance(share, bool):
            raise _fail(qpath, where, "share", f"must be true or false, got {share!r}")
        derived = question.get("user_id") is None
        samples.append(
            LampSample(task, split, sid, user_id, text, extract_query(task, text), gold, profile, share, derived)
        )
    if golds is not None:
        _check_ids(qpath, Path(str(outputs_path)), seen, set(golds))
    return samples


def _check_ids(qpath: Path, opath: Path, question_ids: set[str], gold_ids: set[str]) -> None:
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
    raise LampDataError(f"{qpath} vs {opath}: record ids: field 'id': ids do not match: {'; '.join(parts)}")


def lamp_split_paths(root: str | Path, task: str, split: str, split_kind: str = "time") -> tuple[Path, Path]:
    """(questions, outputs) paths: ``root/LaMP_2_time/dev/dev_questions.json`` (original split: ``LaMP_2``)."""
    task = task_from_name(task)
    if split_kind not in ("time", "original"):
        raise LampDataError(f"split_kind must be 'time' or 'original', got {split_kind!r}")
    folder = f"LaMP_{task[5:]}" + ("_time" if split_kind == "time" else "")
    base = Path(root) / folder / split
    return base / f"{split}_questions.json", base / f"{split}_outputs.json"


def load_lamp_task(
    root: str | Path,
    task: str,
    splits: Iterable[str] = ("train", "dev"),
    split_kind: str = "time",
    undated: str = "error",
) -> dict[str, list[LampSample]]:
    """Load several splits of one task; a split without an outputs file is unlabeled (gold None). A sample id in
    two splits is an error naming both files. The original split derives missing user ids; the time split requires
    them."""
    out: dict[str, list[LampSample]] = {}
    first: dict[str, Path] = {}  # sample id -> questions file of the split that has it
    for split in splits:
        questions, outputs = lamp_split_paths(root, task, split, split_kind)
        out[split] = load_lamp_split(
            questions, outputs if outputs.exists() else None, task, split, undated, split_kind == "original"
        )
        for sample in out[split]:
            if sample.sample_id in first:
                problem = f"duplicate sample id: also in {first[sample.sample_id]}"
                raise _fail(questions, f"record id '{sample.sample_id}'", "id", problem)
        first.update(dict.fromkeys((sample.sample_id for sample in out[split]), questions))
    return out
