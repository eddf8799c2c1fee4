"""LaMP loader with strict validation (docs/methods.md §1); malformed records stop it, or are set aside.

Every ``LampDataError`` message has the form ``<file>: <record>: field '<name>': <problem>`` where ``<record>`` is
``record id '<id>'`` or ``record #<index>`` when the id itself is missing or unusable (prag_models/data/
lamp_validation.py); a malformed record's error also names the setting ``data.malformed``, whose ``set_aside`` leaves
such records out instead, each with a row saying why (prag_models/data/set_aside.py). Besides types and labels,
every id and text must be encodable as UTF-8 without NUL characters (no lone surrogates such as ``"\\ud800"``), a
question list must not be empty, a sample id may appear in only one split of a task, and a profile date must be in
one of the accepted formats (``parse_date``): an unparseable date fails unless ``undated = "keep"`` (then the document
is undated, sorted last); a document without a date is undated. ``undated_documents`` counts them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from prag_models.data.dates import parse_date
from prag_models.data.lamp_golds import Golds, check_ids, load_golds
from prag_models.data.lamp_validation import (
    PROFILE_LABELS,
    VISIBILITIES,
    LampRecordError,
    _as_id,
    _fail,
    _field_text,
    _read_json,
    _record_id,
    _text,
    check_date,
    text_problem,
)
from prag_models.data.set_aside import SetAside, set_aside_row, stop_error
from prag_models.data.tasks import (
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


def derive_user_id(doc_ids: Iterable[str]) -> str:
    """Stable user id for the original split: "p" + first 12 hex of sha1 over the sorted profile doc ids."""
    digest = hashlib.sha1("\n".join(sorted(doc_ids)).encode("utf-8")).hexdigest()
    return "p" + digest[:12]


def undated_documents(samples: Iterable[LampSample]) -> int:
    """How many distinct (user, document) pairs of these samples have no parseable date (in any listing)."""
    return len({(s.user_id, d.doc_id) for s in samples for d in s.profile if parse_date(d.date) is None})


def _usable(value: Any) -> str | None:
    """An id as text when it is usable and can be stored, else None."""
    ident = _as_id(value)
    return ident if ident is not None and text_problem(ident) is None else None


def _document(path: Path, where: str, task: str, j: int, doc: Any, seen: set[str], undated: str) -> ProfileDoc:
    """One validated profile document (the j-th of a question's profile); LampRecordError naming its field."""
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
    return ProfileDoc(doc_id, date, fields, render_document(task, fields), visibility)


def _profile(path: Path, where: str, task: str, docs: Any, undated: str = "error",
             bad: list[LampRecordError] | None = None) -> tuple[ProfileDoc, ...]:  # fmt: skip
    """Validate one question's profile and return it sorted by date (stable; undated docs last). With ``bad`` (a
    list) a malformed document is left out and its error appended there; none left fails the profile."""
    if not isinstance(docs, list):
        raise _fail(path, where, "profile", f"must be a list, got {type(docs).__name__}")
    if not docs:
        raise _fail(path, where, "profile", "is empty")
    out: list[ProfileDoc] = []
    seen: set[str] = set()
    for j, doc in enumerate(docs):
        try:
            out.append(_document(path, where, task, j, doc, seen, undated))
        except LampRecordError as exc:
            if bad is None:
                raise
            bad.append(exc)
    if not out and bad:
        problem = f"every profile document is malformed (first: field '{bad[0].field}': {bad[0].problem})"
        raise _fail(path, where, "profile", problem)
    parsed = [parse_date(d.date) for d in out]
    order = sorted(range(len(out)), key=lambda i: (0, parsed[i], i) if parsed[i] is not None else (1, datetime.min, i))
    return tuple(out[i] for i in order)


def _question(path: Path, index: int, question: Any, task: str, split: str, undated: str, derive_user_ids: bool,
              seen: set[str], bad_docs: list[LampRecordError] | None) -> LampSample:  # fmt: skip
    """One validated question (gold None; a kept one's id joins ``seen``); LampRecordError naming its field. With
    ``bad_docs`` (a list) a malformed profile document is left out and its error appended there."""
    where, sid = _record_id(path, question, index)
    if sid in seen:
        raise _fail(path, where, "id", "duplicate sample id")
    if "input" not in question:
        raise _fail(path, where, "input", "is missing")
    text = question["input"]
    if not isinstance(text, str):
        raise _fail(path, where, "input", f"wrong type {type(text).__name__}")
    if not text.strip():
        raise _fail(path, where, "input", "is empty")
    _text(path, where, "input", text)
    if "profile" not in question:
        raise _fail(path, where, "profile", "is missing")
    profile = _profile(path, where, task, question["profile"], undated, bad_docs)
    if question.get("user_id") is not None:
        user_id = _as_id(question["user_id"])
        if user_id is None:
            raise _fail(path, where, "user_id", f"must be a non-empty string or int, got {question['user_id']!r}")
        _text(path, where, "user_id", user_id)
    elif derive_user_ids:
        user_id = derive_user_id(d.doc_id for d in profile)
    else:  # a derived id would cut the user from his other questions and his neighbours
        raise _fail(path, where, "user_id", "is missing (a time split names each question's user)")
    share = question.get("share")
    if share is not None and not isinstance(share, bool):
        raise _fail(path, where, "share", f"must be true or false, got {share!r}")
    seen.add(sid)
    derived = question.get("user_id") is None
    return LampSample(task, split, sid, user_id, text, extract_query(task, text), None, profile, share, derived)


def _match_golds(qpath: Path, task: str, split: str, samples: list[LampSample], golds: Golds,
                 users: dict[str, str | None], rows: list[SetAside] | None) -> list[LampSample]:  # fmt: skip
    """The samples with their gold outputs. ``rows`` None: the ids must match; a list: samples without a valid gold
    go, and so do golds without a question (``users``: every question id of the file, kept or set aside, and its
    user), each with a row appended to ``rows``."""
    kept = {s.sample_id for s in samples}
    if rows is None:
        check_ids(qpath, golds.path, kept, set(golds.outputs))
        return [replace(s, gold=golds.outputs[s.sample_id]) for s in samples]
    bad_output = set()
    for record_id, error, about_output in golds.flaws:
        goes = about_output and record_id in kept and record_id not in golds.outputs
        bad_output |= {record_id} if goes else set()
        rows.append(set_aside_row(error, task, split, record_id, users.get(record_id), "question" if goes else "gold"))
    out = []
    for sample in samples:
        if sample.sample_id in golds.outputs:
            out.append(replace(sample, gold=golds.outputs[sample.sample_id]))
        elif sample.sample_id not in bad_output:
            error = LampRecordError(qpath, f"record id '{sample.sample_id}'", "id", f"no gold output in {golds.path}")
            rows.append(set_aside_row(error, task, split, sample.sample_id, sample.user_id, "question"))
    for gid in sorted(set(golds.outputs) - set(users)):
        error = LampRecordError(golds.path, f"gold id '{gid}'", "id", f"no question with this id in {qpath}")
        rows.append(set_aside_row(error, task, split, gid, None, "gold"))
    return out


def _nothing_left(path: Path, rows: list[SetAside]) -> LampDataError:
    """The error of a split whose every question was set aside: nothing is left to run on."""
    first = rows[0]
    return LampDataError(f"{path}: every question is malformed (first: record '{first.record_id}': field "
                         f"'{first.field}': {first.reason}); nothing is left to run on")  # fmt: skip


def load_lamp_split(
    questions_path: str | Path,
    outputs_path: str | Path | None,
    task: str,
    split: str,
    undated: str = "error",
    derive_user_ids: bool = False,
    set_aside: list[SetAside] | None = None,
) -> list[LampSample]:
    """Load and validate one split (questions + optional outputs); LampDataError on any malformed input.

    ``undated``: what an unparseable profile date does, ``error`` (the default) or ``keep`` (the document is undated).
    ``derive_user_ids``: a question without ``user_id`` gets an id derived from its profile (LaMP's original split
    has none) instead of failing; such samples say so (``derived_user_id``). ``set_aside``: None (the default) stops
    at the first malformed record, naming the setting ``data.malformed``; a list receives a row per malformed record
    left out instead (prag_models/data/set_aside.py says what goes).
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
    lenient = set_aside is not None
    golds = load_golds(Path(outputs_path), task, lenient) if outputs_path is not None else None
    samples: list[LampSample] = []
    rows: list[SetAside] = []
    seen: set[str] = set()
    users: dict[str, str | None] = {}  # usable question id -> its usable user id (for the rows of its gold)
    for i, question in enumerate(data):
        record_id = _usable(question.get("id")) if isinstance(question, dict) else None
        user_id = _usable(question.get("user_id")) if isinstance(question, dict) else None
        if record_id is not None:
            users.setdefault(record_id, user_id)
        bad_docs: list[LampRecordError] | None = [] if lenient else None
        try:
            sample = _question(qpath, i, question, task, split, undated, derive_user_ids, seen, bad_docs)
        except LampRecordError as exc:
            if not lenient:
                raise stop_error(exc) from None
            rows.append(set_aside_row(exc, task, split, record_id or f"#{i}", user_id, "question"))
            continue
        rows += [set_aside_row(e, task, split, sample.sample_id, sample.user_id, "document") for e in bad_docs or []]
        samples.append(sample)
    if golds is not None:
        samples = _match_golds(qpath, task, split, samples, golds, users, rows if lenient else None)
    if not samples:
        raise _nothing_left(qpath, rows)
    if set_aside is not None:
        set_aside.extend(rows)
    return samples


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
    set_aside: list[SetAside] | None = None,
) -> dict[str, list[LampSample]]:
    """Load several splits of one task; a split without an outputs file is unlabeled (gold None). A sample id in
    two splits is an error naming both files (set aside: the later split's question goes). The original split derives
    missing user ids; the time split requires them. ``set_aside`` as in ``load_lamp_split``."""
    out: dict[str, list[LampSample]] = {}
    first: dict[str, Path] = {}  # sample id -> questions file of the split that has it
    for split in splits:
        questions, outputs = lamp_split_paths(root, task, split, split_kind)
        rows: list[SetAside] | None = None if set_aside is None else []
        loaded = load_lamp_split(questions, outputs if outputs.exists() else None, task, split, undated,
                                 split_kind == "original", rows)  # fmt: skip
        out[split] = []
        for sample in loaded:
            if sample.sample_id not in first:
                out[split].append(sample)
                continue
            problem = f"duplicate sample id: also in {first[sample.sample_id]}"
            error = LampRecordError(questions, f"record id '{sample.sample_id}'", "id", problem)
            if rows is None:
                raise stop_error(error)
            rows.append(set_aside_row(error, sample.task, split, sample.sample_id, sample.user_id, "question"))
        if not out[split] and rows:
            raise _nothing_left(questions, rows)
        first.update(dict.fromkeys((sample.sample_id for sample in out[split]), questions))
        if set_aside is not None and rows:
            set_aside.extend(rows)
    return out
