"""PersonaBench loader for retrieval (docs/methods.md §4.5): segments per person, questions, gold ids, cached PBR
expansions.

Reads the PersonaBench folder layout (``eval_info/`` and ``private_data/noise_X/`` of one community) from wherever the
caller points; the data itself never lives in this project.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prag_models.data.pbr_expansions import PbrExpansion, expansions_from_records

#: Private-data sources of a person, in the order the authors' code indexes them (docs/methods.md §4.5).
SOURCES: tuple[str, ...] = ("conversation", "user_ai_interaction", "purchase_history")
#: Evaluation categories, in table order (Subjective questions are skipped by default, docs/methods.md §4.5).
CATEGORIES: tuple[str, ...] = ("Basic information", "Preference easy", "Preference hard", "Social")
EXCLUDED_KEYS: tuple[str, ...] = ("segment_id", "session")
EXPANSIONS_FILE = "pbr_cached_expansions.json"


@dataclass(frozen=True)
class Segment:
    """One retrievable document of a user: a session (PersonaBench) or a chat session (LongMemEval)."""

    user: str
    segment_id: str
    text: str
    source: str = ""


@dataclass(frozen=True)
class RetrievalQuestion:
    """A question asked by a user against their own corpus, with its gold segment ids.

    ``gold_sets`` holds one list of segment ids per gold answer value; any one segment of a list supports that
    answer, and the question is scored on the best combination of one segment per list (docs/methods.md §4.5).
    """

    dataset: str
    user: str
    q_id: str
    question: str
    gold_sets: list[list[str]]
    category: str
    answer: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_record(cls, dataset: str, user: str, q_id: str, record: Mapping[str, Any], gold_sets: list[list[str]],
                    category: str, extra: dict[str, Any]) -> RetrievalQuestion:  # fmt: skip
        """A question from a dataset's record: its ``question`` field, and its ``answer`` (not text: as JSON)."""
        answer = record.get("answer", "")
        return cls(dataset, user, q_id, str(record["question"]), gold_sets, category,
                   answer if isinstance(answer, str) else json.dumps(answer), extra)  # fmt: skip


@dataclass
class PersonaBenchData:
    """Everything the retrieval evaluation needs from one PersonaBench community."""

    segments_by_user: dict[str, list[Segment]]
    questions: list[RetrievalQuestion]
    expansions: dict[str, PbrExpansion]
    skipped: dict[str, int] = field(default_factory=dict)


def _read_json(path: Path) -> Any:
    """Read a JSON file, raising ValueError that names the file when it is missing or malformed."""
    if not path.exists():
        raise ValueError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None


def _strip_keys(value: Any, keys: tuple[str, ...]) -> Any:
    """Remove the given keys from every dict nested in value."""
    if isinstance(value, dict):
        return {k: _strip_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_strip_keys(v, keys) for v in value]
    return value


def segment_text(session: Mapping[str, Any]) -> str:
    """A session as compact JSON without ``segment_id``/``session`` (the text the authors embed, docs/methods.md
    §4.5)."""
    return json.dumps(_strip_keys(dict(session), EXCLUDED_KEYS), separators=(",", ":"))


def community_dir(path: str | Path, community: str = "community_1") -> Path:
    """The community folder given it, its parent, or the shared-data root holding ``personabench/``."""
    base = Path(path).expanduser()
    for candidate in (base, base / community, base / "personabench" / community):
        if (candidate / "eval_info").is_dir():
            return candidate
    raise ValueError(
        f"{base}: no PersonaBench community folder (eval_info/) found here, in {community}/ "
        f"or in personabench/{community}/"
    )


def _person_records(path: Path) -> dict[str, list[Any]]:
    """Name -> Data list of a private-data file ``[{"Name", "Data"}]``."""
    data = _read_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of {{'Name', 'Data'}} records")
    out: dict[str, list[Any]] = {}
    for i, rec in enumerate(data):
        if not isinstance(rec, dict) or not isinstance(rec.get("Name"), str) or not isinstance(rec.get("Data"), list):
            raise ValueError(f"{path}: record {i} needs a string 'Name' and a list 'Data'")
        out[rec["Name"]] = rec["Data"]
    return out


def _sessions(source: str, data: list[Any], path: Path, name: str) -> list[dict[str, Any]]:
    """Flatten one person's data of a source into sessions (conversations are grouped by partner)."""
    if source != "conversation":
        sessions = data
    else:
        sessions = []
        for j, partner in enumerate(data):
            if not isinstance(partner, dict) or not isinstance(partner.get("Conversations"), list):
                raise ValueError(f"{path}: person {name!r}, entry {j} needs a list 'Conversations'")
            sessions.extend(partner["Conversations"])
    for j, sess in enumerate(sessions):
        if not isinstance(sess, dict) or not isinstance(sess.get("segment_id"), str):
            raise ValueError(f"{path}: person {name!r}, session {j} needs a string 'segment_id'")
    return sessions


def load_segments(cdir: Path, noise: str = "0.0") -> dict[str, list[Segment]]:
    """Each person's segments: conversation, user-AI interaction and purchase-history sessions, in that order."""
    by_user: dict[str, list[Segment]] = {}
    for source in SOURCES:
        path = cdir / "private_data" / f"noise_{noise}" / f"{source}_data_all.json"
        for name, data in _person_records(path).items():
            segs = by_user.setdefault(name, [])
            for sess in _sessions(source, data, path, name):
                segs.append(Segment(name, sess["segment_id"], segment_text(sess), source))
    for name, segs in by_user.items():
        ids = [s.segment_id for s in segs]
        if len(ids) != len(set(ids)):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"{cdir}: person {name!r} has duplicate segment ids {dup[:5]}")
    return by_user


def question_category(qtype: str, difficulty: str) -> str:
    """Table category of a question: Basic information, Preference easy/hard, Social (or Subjective)."""
    if qtype == "Preference":
        if difficulty not in {"easy", "hard"}:
            raise ValueError(f"Preference question with unknown difficulty {difficulty!r}")
        return f"Preference {difficulty}"
    if qtype in {"Basic information", "Social", "Subjective"}:
        return qtype
    raise ValueError(f"unknown question type {qtype!r}")


def _gold_lookup(path: Path) -> dict[str, list[list[str]]]:
    """q_id -> gold segment-id lists (one per answer value) from ``qa_gt_context_all_noise_X.json``."""
    data = _read_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of questions")
    out: dict[str, list[list[str]]] = {}
    for i, rec in enumerate(data):
        seg = rec.get("segment_id") if isinstance(rec, dict) else None
        if not isinstance(rec, dict) or "q_id" not in rec or not isinstance(seg, dict) or not seg:
            raise ValueError(f"{path}: record {i} needs 'q_id' and a non-empty 'segment_id' mapping")
        gold = []
        for answer, ids in seg.items():
            if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
                raise ValueError(f"{path}: q_id {rec['q_id']!r}, answer {answer!r}: expected a non-empty id list")
            gold.append(list(ids))
        out[str(rec["q_id"])] = gold
    return out


def _qa_by_person(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Name -> qa list of ``eval_info_all.json``-shaped files."""
    data = _read_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of {{'Name', 'Eval_Info'}} records")
    out: dict[str, list[dict[str, Any]]] = {}
    for i, rec in enumerate(data):
        qa = rec.get("Eval_Info", {}).get("qa") if isinstance(rec, dict) else None
        if not isinstance(rec, dict) or not isinstance(rec.get("Name"), str) or not isinstance(qa, list):
            raise ValueError(f"{path}: record {i} needs a string 'Name' and 'Eval_Info': {{'qa': [...]}}")
        out[rec["Name"]] = qa
    return out


def load_personabench(
    path: str | Path,
    community: str = "community_1",
    noise: str = "0.0",
    include_subjective: bool = False,
    with_expansions: bool = True,
) -> PersonaBenchData:
    """Load one PersonaBench community: persons' segments, their questions with gold ids, cached expansions.

    Only persons with private data are kept (their questions are the ones with gold ids); Subjective questions are
    skipped unless ``include_subjective`` (docs/methods.md §4.5). Cached expansions come from
    ``pbr_cached_expansions.json``
    when present (``fake_10`` pseudo utterances and ``reason``, docs/methods.md §4.6).
    """
    cdir = community_dir(path, community)
    segments = load_segments(cdir, noise)
    gold_path = cdir / "eval_info" / f"qa_gt_context_all_noise_{noise}.json"
    gold = _gold_lookup(gold_path)
    info_path = cdir / "eval_info" / "eval_info_all.json"
    questions: list[RetrievalQuestion] = []
    skipped = {"subjective": 0, "person_without_data": 0}
    for name, qa in _qa_by_person(info_path).items():
        if name not in segments:
            skipped["person_without_data"] += len(qa)
            continue
        for j, rec in enumerate(qa):
            if not isinstance(rec, dict) or not all(k in rec for k in ("q_id", "question", "type")):
                raise ValueError(f"{info_path}: person {name!r}, qa {j} needs 'q_id', 'question' and 'type'")
            q_id = str(rec["q_id"])
            try:
                category = question_category(str(rec["type"]), str(rec.get("difficulty", "")))
            except ValueError as exc:
                raise ValueError(f"{info_path}: person {name!r}, q_id {q_id!r}: {exc}") from None
            if category == "Subjective" and not include_subjective:
                skipped["subjective"] += 1
                continue
            if q_id not in gold:
                raise ValueError(f"{gold_path}: no gold segment ids for q_id {q_id!r} (person {name!r})")
            extra = {"type": rec["type"], "difficulty": rec.get("difficulty")}
            question = RetrievalQuestion.from_record("personabench", name, q_id, rec, gold[q_id], category, extra)
            questions.append(question)
    expansions: dict[str, PbrExpansion] = {}
    exp_path = cdir / "eval_info" / EXPANSIONS_FILE
    if with_expansions and exp_path.exists():
        records = {str(r.get("q_id")): r for qa in _qa_by_person(exp_path).values() for r in qa if isinstance(r, dict)}
        wanted = {q.q_id for q in questions}
        expansions = expansions_from_records({k: v for k, v in records.items() if k in wanted}, str(exp_path))
    return PersonaBenchData(segments, questions, expansions, skipped)


def community_names(path: str | Path) -> list[tuple[str, Path]]:
    """(name, folder) of every PersonaBench community under path: its ``community_*``-like sub-folders holding
    ``eval_info/`` (also under ``personabench/``), or path itself when it is one community."""
    base = Path(path).expanduser()
    for root in (base, base / "personabench"):
        if (root / "eval_info").is_dir():
            return [(root.name, root)]
        found = sorted((d.name, d) for d in root.glob("*") if (d / "eval_info").is_dir()) if root.is_dir() else []
        if found:
            return found
    raise ValueError(f"{base}: no PersonaBench community folder (a folder with eval_info/) here or in personabench/")


def _prefixed(data: PersonaBenchData, community: str) -> PersonaBenchData:
    """One community's data with person names, segment ids and q_ids prefixed ``<community>/`` (unique when pooled)."""

    def p(x: str) -> str:
        return f"{community}/{x}"

    segments = {
        p(user): [Segment(p(user), p(s.segment_id), s.text, s.source) for s in segs]
        for user, segs in data.segments_by_user.items()
    }
    questions = [
        RetrievalQuestion(
            q.dataset,
            p(q.user),
            p(q.q_id),
            q.question,
            [[p(s) for s in g] for g in q.gold_sets],
            q.category,
            q.answer,
            {**q.extra, "community": community},
        )  # fmt: skip
        for q in data.questions
    ]
    expansions = {p(k): v for k, v in data.expansions.items()}
    return PersonaBenchData(segments, questions, expansions, dict(data.skipped))


def community_of(q_id: str) -> str:
    """The community a pooled question id belongs to (its ``<community>/`` prefix)."""
    return q_id.split("/", 1)[0]


def load_personabench_pool(
    path: str | Path,
    communities: tuple[str, ...] | list[str] = (),
    noise: str = "0.0",
    include_subjective: bool = False,
    with_expansions: bool = True,
) -> PersonaBenchData:
    """Every configured community (default: all found) pooled as the paper pools them; ids prefixed by community."""
    found = dict(community_names(path))
    names = list(communities) or list(found)
    unknown = [c for c in names if c not in found]
    if unknown:
        raise ValueError(f"{path}: PersonaBench communities {unknown} not found; there are {sorted(found)}")
    pooled = PersonaBenchData({}, [], {}, {})
    for name in names:
        if not (found[name] / "eval_info" / f"qa_gt_context_all_noise_{noise}.json").is_file():
            raise ValueError(f"{found[name]}: no noise level {noise} (eval_info/qa_gt_context_all_noise_{noise}.json)")
        part = _prefixed(load_personabench(found[name], name, noise, include_subjective, with_expansions), name)
        pooled.segments_by_user |= part.segments_by_user
        pooled.questions += part.questions
        pooled.expansions |= part.expansions
        for key, value in part.skipped.items():
            pooled.skipped[key] = pooled.skipped.get(key, 0) + value
    return pooled
