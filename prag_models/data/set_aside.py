"""Malformed LaMP records: stop the load (the default) or set them aside and go on (docs/how-to/own-data.md).

``data.malformed = "stop"``: the first malformed record raises ``LampDataError`` with the standard message (file,
record, field, problem and allowed values) and names the setting below. ``"set_aside"``: the record leaves the data
and a row of table ``set_aside_records`` says which file, record and field, why, and what went (``dropped``):

- ``question``: a malformed question, or a malformed gold output of it, drops that sample (with its gold);
- ``document``: a malformed profile document drops only that document from the question's profile (when none is
  left the question goes, as a ``question``);
- ``gold``: a gold output without a usable id, a repeated gold id or one without a question is dropped.

A record whose id or user_id is unusable goes as a whole; a repeated sample id (in a file or across splits) keeps the
first occurrence. Flaws of a whole file (not UTF-8, not JSON, not a list, the wrong task, no question left) stop
under either setting: nothing would be left to run on.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from prag_models.data.lamp_validation import LampRecordError, _printable
from prag_models.data.tasks import LampDataError

SET_ASIDE_TABLE = "set_aside_records"
SET_ASIDE_COLUMNS = ("task", "split", "file", "record_id", "user_id", "field", "reason", "dropped")
#: What the strict error adds: the setting that sets such records aside instead.
SETTING_HINT = (
    'data.malformed = "set_aside" (env PRAG__DATA__MALFORMED=set_aside) sets malformed records aside '
    f"(table {SET_ASIDE_TABLE}) and goes on"
)


@dataclass(frozen=True)
class SetAside:
    """One malformed record left out of the data: where it is, what is wrong with it, and what went."""

    task: str
    split: str
    file: str
    record_id: str  # the record's id, or "#<index>" in its file when the id itself is unusable
    user_id: str | None  # the question's user when usable (`prag forget` deletes the user's rows by it)
    field: str
    reason: str
    dropped: str  # question | document | gold


def stop_error(error: LampRecordError) -> LampDataError:
    """The error to raise when malformed records stop the load: the standard message and the setting."""
    return LampDataError(f"{error} — {SETTING_HINT}")


def set_aside_row(
    error: LampRecordError, task: str, split: str, record_id: str, user_id: str | None, dropped: str
) -> SetAside:
    """The row that records an error's record as set aside (texts printable, as in the message)."""
    return SetAside(task, split, _printable(str(error.path)), record_id, user_id, error.field, error.problem, dropped)


def set_aside_frame(rows: Iterable[SetAside]) -> pd.DataFrame:
    """The rows as table set_aside_records (every column text; an empty frame keeps the columns)."""
    return pd.DataFrame([asdict(r) for r in rows], columns=list(SET_ASIDE_COLUMNS)).astype("string")


def set_aside_counts(frame: pd.DataFrame) -> dict[str, int]:
    """How many records of each kind (question, document, gold) a frame of set-aside rows dropped."""
    return {str(k): int(v) for k, v in frame["dropped"].value_counts().sort_index().items()}


def set_aside_lines(con: Any, tasks: Sequence[str]) -> list[str]:
    """One short line per task with set-aside records (none when there are none), read from the store."""
    from prag_models.storage.store import table_exists

    if not table_exists(con, SET_ASIDE_TABLE):
        return []
    frame = con.execute(f"SELECT task, dropped FROM {SET_ASIDE_TABLE}").df()
    lines = []
    for task in tasks:
        counts = set_aside_counts(frame[frame["task"] == task])
        if counts:
            kinds = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in counts.items())
            total = sum(counts.values())
            lines.append(f"{task}: {total} malformed record{'s' if total > 1 else ''} set aside ({kinds}): "
                         f"table {SET_ASIDE_TABLE}")  # fmt: skip
    return lines
