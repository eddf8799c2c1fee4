"""LaMP loader with strict validation (docs/methods.md §1).

Every ``LampDataError`` message has the form ``<file>: <record>: field '<name>': <problem>`` where ``<record>`` is
``record id '<id>'`` or ``record #<index>`` when the id itself is missing or unusable.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
]


@dataclass(frozen=True)
class ProfileDoc:
    """One profile document: its id, raw date string, task fields and rendered text."""

    doc_id: str
    date: str | None
    fields: dict[str, str]
    text: str


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


#: Profile fields that carry the task's label: a LaMP-2 tag, a LaMP-3 score (1–5); anything else is an error.
PROFILE_LABELS: dict[tuple[str, str], tuple[str, ...]] = {
    ("LaMP-2", "tag"): LABELS["LaMP-2"],
    ("LaMP-3", "score"): LABELS["LaMP-3"],
}
_YEAR = re.compile(r"^(\d{4})$")
_YEAR_MONTH = re.compile(r"^(\d{4})[-/](\d{1,2})$")
_TZ_WORD = re.compile(r"\s[A-Z]{3,4}(?=\s\d{4}$)")
_FORMATS = (
    "%Y/%m/%d",
    "%Y/%m/%d %H:%M:%S",
    "%m/%d/%Y",
    "%m/%d/%Y %H:%M:%S",
    "%d.%m.%Y",
    "%B %d, %Y",
    "%b %d, %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%a %b %d %H:%M:%S %z %Y",
    "%a %b %d %H:%M:%S %Y",
    "%Y%m%d",
)


def _naive_utc(value: datetime) -> datetime:
    """Drop the time zone after converting to UTC (naive datetimes are kept as they are)."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def parse_date(value: str | int | float | None) -> datetime | None:
    """Parse a LaMP date ("YYYY", "YYYY-MM", ISO, Twitter/RFC-2822 style, epoch seconds); None if unparseable."""
    if value is None or isinstance(value, bool):
        return None
    text = str(int(value)) if isinstance(value, int | float) else str(value).strip()
    if not text:
        return None
    if m := _YEAR.match(text):
        return datetime(int(m.group(1)), 1, 1)
    if m := _YEAR_MONTH.match(text):
        month = int(m.group(2))
        return datetime(int(m.group(1)), month, 1) if 1 <= month <= 12 else None
    if text.isdigit() and len(text) >= 9:
        try:
            return datetime.fromtimestamp(int(text), UTC).replace(tzinfo=None)
        except (OverflowError, OSError, ValueError):
            return None
    try:
        return _naive_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    candidate = _TZ_WORD.sub("", text)  # "Mon Apr 06 22:19:45 PDT 2009" -> without the zone word
    for fmt in _FORMATS:
        try:
            return _naive_utc(datetime.strptime(candidate, fmt))
        except ValueError:
            continue
    try:
        return _naive_utc(email.utils.parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError):
        return None


def derive_user_id(doc_ids: Iterable[str]) -> str:
    """Stable user id for the original split: "p" + first 12 hex of sha1 over the sorted profile doc ids."""
    digest = hashlib.sha1("\n".join(sorted(doc_ids)).encode("utf-8")).hexdigest()
    return "p" + digest[:12]


def _fail(path: Path, where: str, field: str, problem: str) -> LampDataError:
    """Build the error with the standard ``file: record: field: problem`` message."""
    return LampDataError(f"{path}: {where}: field '{field}': {problem}")


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
    return f"{what} id '{rid}'" if rid is not None else f"{what} #{index}"


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


def _profile(path: Path, where: str, task: str, docs: Any) -> tuple[ProfileDoc, ...]:
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
            allowed = PROFILE_LABELS.get((task, name))
            if allowed is not None and value.strip() not in allowed:
                problem = f"{value!r} is not a {task} label {list(allowed)}"
                raise _fail(path, where, f"profile doc '{doc_id}'.{name}", problem)
            fields[name] = value
        date = doc.get("date")
        if date is not None and (isinstance(date, bool) or not isinstance(date, str | int)):
            raise _fail(path, where, f"profile doc '{doc_id}'.date", f"wrong type {type(date).__name__}")
        out.append(ProfileDoc(doc_id, None if date is None else str(date), fields, render_document(task, fields)))
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
        if "output" not in gold:
            raise _fail(path, where, "output", "is missing")
        output = gold["output"]
        if task == "LaMP-3" and isinstance(output, int) and not isinstance(output, bool):
            output = str(output)
        if not isinstance(output, str):
            raise _fail(path, where, "output", f"wrong type {type(output).__name__}")
        if labels is not None and output.strip() not in labels:
            raise _fail(path, where, "output", f"{output!r} is not a {task} label {list(labels)}")
        if gid in out:
            raise _fail(path, where, "id", "duplicate gold id")
        out[gid] = output.strip() if labels is not None else output
    return out


def load_lamp_split(
    questions_path: str | Path, outputs_path: str | Path | None, task: str, split: str
) -> list[LampSample]:
    """Load and validate one split (questions + optional outputs); LampDataError on any malformed input."""
    qpath = Path(questions_path)
    try:
        task = task_from_name(task)
    except LampDataError as exc:
        raise LampDataError(f"{qpath}: {exc}") from None
    data = _read_json(qpath)
    if not isinstance(data, list):
        raise _fail(qpath, "top level", "<root>", f"must be a list of questions, got {type(data).__name__}")
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
        if "profile" not in question:
            raise _fail(qpath, where, "profile", "is missing")
        profile = _profile(qpath, where, task, question["profile"])
        if question.get("user_id") is not None:
            user_id = _as_id(question["user_id"])
            if user_id is None:
                raise _fail(qpath, where, "user_id", f"must be a non-empty string or int, got {question['user_id']!r}")
        else:
            user_id = derive_user_id(d.doc_id for d in profile)
        gold = golds.get(sid) if golds is not None else None
        samples.append(LampSample(task, split, sid, user_id, text, extract_query(task, text), gold, profile))
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
    root: str | Path, task: str, splits: Iterable[str] = ("train", "dev"), split_kind: str = "time"
) -> dict[str, list[LampSample]]:
    """Load several splits of one task; a split without an outputs file is unlabeled (gold None)."""
    out: dict[str, list[LampSample]] = {}
    for split in splits:
        questions, outputs = lamp_split_paths(root, task, split, split_kind)
        out[split] = load_lamp_split(questions, outputs if outputs.exists() else None, task, split)
    return out
