"""LongMemEval loader for retrieval evaluation (docs/methods.md §4.5), original LongMemEval schema.

Each question is its own haystack, so the "user" of a question is its ``question_id``. Documents are the haystack
sessions reduced to their user turns; gold documents are the sessions holding a turn with ``has_answer``;
abstention questions (``_abs``) are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prag_models.data.personabench import RetrievalQuestion, Segment

DEFAULT_FILE = "longmemeval_s_3.json"
_REQUIRED = ("question_id", "question", "haystack_session_ids", "haystack_sessions")


def session_text(date: str, turns: list[dict[str, Any]]) -> str:
    """A session's user turns as compact JSON ``{"date", "conversation": [...]}`` (the authors' rendering)."""
    user_turns = [str(t.get("content", "")) for t in turns if t.get("role") == "user"]
    return json.dumps({"date": date, "conversation": user_turns}, separators=(",", ":"))


def longmemeval_file(path: str | Path) -> Path:
    """The LongMemEval JSON given it, its folder, or the shared-data root holding ``longmemeval/``."""
    base = Path(path).expanduser()
    for candidate in (base, base / DEFAULT_FILE, base / "longmemeval" / DEFAULT_FILE):
        if candidate.is_file():
            return candidate
    raise ValueError(f"{base}: no LongMemEval file here, as {DEFAULT_FILE} or as longmemeval/{DEFAULT_FILE}")


def _check_record(rec: Any, i: int, path: Path) -> None:
    """Raise ValueError naming the file and record when a question record is malformed."""
    if not isinstance(rec, dict) or not all(k in rec for k in _REQUIRED):
        raise ValueError(f"{path}: record {i} needs the fields {list(_REQUIRED)}")
    ids, sessions = rec["haystack_session_ids"], rec["haystack_sessions"]
    dates = rec.get("haystack_dates", [""] * len(ids))
    if not (isinstance(ids, list) and isinstance(sessions, list) and isinstance(dates, list)):
        raise ValueError(f"{path}: question {rec['question_id']!r}: haystack fields must be lists")
    if not len(ids) == len(sessions) == len(dates):
        raise ValueError(f"{path}: question {rec['question_id']!r}: haystack ids, sessions and dates differ in length")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: question {rec['question_id']!r}: duplicate haystack session ids")
    for sid, sess in zip(ids, sessions, strict=True):
        if not isinstance(sess, list) or not all(isinstance(t, dict) and "role" in t for t in sess):
            raise ValueError(
                f"{path}: question {rec['question_id']!r}, session {sid!r}: expected a list of turns with a 'role'"
            )


def load_longmemeval(path: str | Path) -> tuple[list[RetrievalQuestion], dict[str, list[Segment]]]:
    """Questions (category = question_type) and per-question haystack segments of a LongMemEval file.

    Each gold session is its own gold list (``gold_sets = [[s1], [s2], ...]``), so the single combination is the
    set of all gold sessions: recall_any@K and NDCG@K then follow LongMemEval's definitions.
    """
    file = longmemeval_file(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"{file}: expected a list of question records")
    questions: list[RetrievalQuestion] = []
    segments: dict[str, list[Segment]] = {}
    for i, rec in enumerate(data):
        _check_record(rec, i, file)
        q_id = str(rec["question_id"])
        if q_id.endswith("_abs"):
            continue
        ids = [str(s) for s in rec["haystack_session_ids"]]
        dates = [str(d) for d in rec.get("haystack_dates", [""] * len(ids))]
        sessions = rec["haystack_sessions"]
        gold = [sid for sid, sess in zip(ids, sessions, strict=True) if any(t.get("has_answer") for t in sess)]
        if not gold:
            raise ValueError(f"{file}: question {q_id!r} has no session with a 'has_answer' turn")
        segments[q_id] = [
            Segment(q_id, sid, session_text(date, sess), "session")
            for sid, date, sess in zip(ids, dates, sessions, strict=True)
        ]
        category, golds = str(rec.get("question_type", "unknown")), [[sid] for sid in gold]
        extra = {"question_date": rec.get("question_date"), "answer_session_ids": rec.get("answer_session_ids")}
        questions.append(RetrievalQuestion.from_record("longmemeval", q_id, q_id, rec, golds, category, extra))
    return questions, segments
