"""Field-level validation of LaMP records (docs/methods.md §1): the standard error, text, ids, labels and dates.

Every error message has the form ``<file>: <record>: field '<name>': <problem>`` (``LampRecordError`` keeps the parts);
``<record>`` is ``record id '<id>'`` or ``record #<index>`` when the id itself is missing or unusable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prag_models.data.dates import parse_date
from prag_models.data.tasks import LABELS, LampDataError

VISIBILITIES = ("shared", "private")  # a profile document's optional visibility (prag_models.data.sharing)

#: Profile fields that carry the task's label: a LaMP-2 tag, a LaMP-3 score (1–5); anything else is an error.
PROFILE_LABELS: dict[tuple[str, str], tuple[str, ...]] = {
    ("LaMP-2", "tag"): LABELS["LaMP-2"],
    ("LaMP-3", "score"): LABELS["LaMP-3"],
}


def _printable(text: str) -> str:
    """The text with lone surrogates and NUL escaped (``\\ud800``, ``\\x00``), so that a message can be printed."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


class LampRecordError(LampDataError):
    """A malformed record: the standard message, and its parts (file, record, field, problem) for a set-aside row."""

    def __init__(self, path: Path, where: str, field: str, problem: str) -> None:
        self.path, self.where, self.field = path, _printable(where), _printable(field)
        self.problem = _printable(problem)
        super().__init__(_printable(f"{path}: {where}: field '{field}': {problem}"))


def _fail(path: Path, where: str, field: str, problem: str) -> LampDataError:
    """Build the error with the standard ``file: record: field: problem`` message (always printable): a
    LampRecordError for a record, a plain LampDataError for the whole file (``where`` = "top level")."""
    if where == "top level":
        return LampDataError(_printable(f"{path}: {where}: field '{field}': {problem}"))
    return LampRecordError(path, where, field, problem)


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


def _record_id(path: Path, record: Any, index: int, what: str = "record") -> tuple[str, str]:
    """How error messages refer to a record (:func:`_record`) and its validated id (the record a JSON object with a
    usable text ``id``); LampRecordError naming the field."""
    where = _record(record, index, what)
    if not isinstance(record, dict):
        raise _fail(path, where, "<record>", f"must be an object, got {type(record).__name__}")
    rid = _as_id(record.get("id"))
    if rid is None:
        raise _fail(path, where, "id", "is missing" if "id" not in record else f"bad id {record['id']!r}")
    return where, _text(path, where, "id", rid)


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
