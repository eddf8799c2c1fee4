"""PersonaBench and LongMemEval loaders (docs/methods.md §4.5) on files written here, and on the real folder when
present."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from prag_models.data.longmemeval import load_longmemeval
from prag_models.data.personabench import load_personabench, segment_text

ROOT = Path(__file__).resolve().parent.parent


def _real_data() -> Path:
    """PRAG_REAL_DATA (default ../shared/data), relative paths taken from the repository root."""
    path = Path(os.environ.get("PRAG_REAL_DATA", "../shared/data")).expanduser()
    return path if path.is_absolute() else (ROOT / path).resolve()


REAL = _real_data()
needs_personabench = pytest.mark.skipif(
    not (REAL / "personabench").is_dir(), reason=f"real PersonaBench data not found at {REAL} (set PRAG_REAL_DATA)"
)
needs_longmemeval = pytest.mark.skipif(
    not (REAL / "longmemeval").is_dir(), reason=f"real LongMemEval data not found at {REAL} (set PRAG_REAL_DATA)"
)


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def _qa(q_id: str, qtype: str, difficulty: str = "easy", **extra: Any) -> dict[str, Any]:
    return {"q_id": q_id, "question": f"question {q_id}?", "answer": "x", "type": qtype, "difficulty": difficulty,
            "outdated_value": None, **extra}


def _personabench(root: Path) -> Path:
    """A two-person community: Ann has private data, Bob (no data) only questions."""
    c = root / "personabench" / "community_1"
    priv = c / "private_data" / "noise_0.0"
    conv = {"session": "conversation---session---1", "time": "t1", "target_name": "Bob",
            "conversation": [{"role": "Ann", "content": "I love caf\u00e9s"}], "segment_id": "c1"}
    _write(priv / "conversation_data_all.json",
           [{"Name": "Ann", "Data": [{"Target_name": "Bob", "Conversations": [conv]}]}])
    uai = {"session": "user_ai_interaction---session---1", "time": "t2",
           "user_ai_interaction": [{"role": "user", "content": "hi"}], "segment_id": "u1"}
    _write(priv / "user_ai_interaction_data_all.json", [{"Name": "Ann", "Data": [uai]}])
    buy = {"session": "purchase_history---session---1", "time": "t3",
           "purchase_history": [{"title": "Mat", "categories": ["Yoga"]}], "segment_id": "p1"}
    _write(priv / "purchase_history_data_all.json", [{"Name": "Ann", "Data": [buy]}])
    qa = [_qa("q1", "Basic information"), _qa("q2", "Preference", "hard"), _qa("q3", "Subjective"),
          _qa("q4", "Social", "hard")]
    _write(c / "eval_info" / "eval_info_all.json",
           [{"Name": "Ann", "Eval_Info": {"qa": qa}}, {"Name": "Bob", "Eval_Info": {"qa": [_qa("b1", "Social")]}}])
    _write(c / "eval_info" / "qa_gt_context_all_noise_0.0.json", [
        {"q_id": "q1", "question": "", "answer": "x", "segment_id": {"x": ["c1"]}},
        {"q_id": "q2", "question": "", "answer": ["y", "z"], "segment_id": {"y": ["u1", "c1"], "z": ["p1"]}},
        {"q_id": "q3", "question": "", "answer": "x", "segment_id": {"x": ["c1"]}},
        {"q_id": "q4", "question": "", "answer": "x", "segment_id": {"x": ["u1"]}},
    ])
    cached = [dict(q, fake_10=[f"utterance {i}" for i in range(10)], reason="because") for q in qa]
    _write(c / "eval_info" / "pbr_cached_expansions.json", [{"Name": "Ann", "Eval_Info": {"qa": cached}}])
    return c


def test_personabench_loader(tmp_path: Path) -> None:
    _personabench(tmp_path)
    data = load_personabench(tmp_path)  # the shared-data root works, as do the community folder and its parent
    assert load_personabench(tmp_path / "personabench").questions == data.questions
    segs = data.segments_by_user["Ann"]
    assert [(s.segment_id, s.source) for s in segs] == [
        ("c1", "conversation"), ("u1", "user_ai_interaction"), ("p1", "purchase_history")]
    assert segs[0].text == ('{"time":"t1","target_name":"Bob","conversation":[{"role":"Ann",'
                            '"content":"I love caf\\u00e9s"}]}')
    assert segs[2].text == segment_text({"segment_id": "p1", "session": "s", "time": "t3",
                                         "purchase_history": [{"title": "Mat", "categories": ["Yoga"]}]})
    assert [q.q_id for q in data.questions] == ["q1", "q2", "q4"]
    assert [q.category for q in data.questions] == ["Basic information", "Preference hard", "Social"]
    assert data.questions[1].gold_sets == [["u1", "c1"], ["p1"]]
    assert data.questions[0].dataset == "personabench" and data.questions[0].user == "Ann"
    assert data.skipped == {"subjective": 1, "person_without_data": 1}
    assert set(data.expansions) == {"q1", "q2", "q4"}
    assert data.expansions["q2"].pseudo_utterances[9] == "utterance 9" and data.expansions["q2"].reasoning == "because"
    with_subjective = load_personabench(tmp_path, include_subjective=True)
    assert [q.category for q in with_subjective.questions][2] == "Subjective"


def test_personabench_malformed_inputs(tmp_path: Path) -> None:
    c = _personabench(tmp_path)
    priv = c / "private_data" / "noise_0.0" / "user_ai_interaction_data_all.json"
    _write(priv, [{"Name": "Ann", "Data": [{"session": "s", "time": "t"}]}])
    with pytest.raises(ValueError, match=r"user_ai_interaction_data_all\.json.*'Ann', session 0.*segment_id"):
        load_personabench(c)
    priv.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"user_ai_interaction_data_all\.json: not valid JSON"):
        load_personabench(c)
    _personabench(tmp_path)
    _write(c / "eval_info" / "qa_gt_context_all_noise_0.0.json",
           [{"q_id": "q1", "segment_id": {"x": ["c1"]}}])
    with pytest.raises(ValueError, match=r"qa_gt_context_all_noise_0\.0\.json: no gold segment ids for q_id 'q2'"):
        load_personabench(c)
    _write(c / "eval_info" / "qa_gt_context_all_noise_0.0.json", [{"q_id": "q1", "segment_id": {"x": []}}])
    with pytest.raises(ValueError, match="q_id 'q1', answer 'x'"):
        load_personabench(c)
    with pytest.raises(ValueError, match="no PersonaBench community folder"):
        load_personabench(tmp_path / "nowhere")


def _longmemeval(root: Path) -> Path:
    def turn(role: str, content: str, has_answer: bool = False) -> dict[str, Any]:
        return {"role": role, "content": content, **({"has_answer": True} if has_answer else {})}

    q = {"question_id": "q1", "question_type": "single-session-user", "question": "Where?", "answer": "Paris",
         "question_date": "2023/05/01", "haystack_session_ids": ["s1", "answer_1", "s3"],
         "haystack_dates": ["d1", "d2", "d3"], "answer_session_ids": ["answer_1"],
         "haystack_sessions": [[turn("user", "hello"), turn("assistant", "hi")],
                               [turn("user", "I moved to Paris", True), turn("assistant", "nice")],
                               [turn("assistant", "only me")]]}
    abstention = dict(q, question_id="q2_abs")
    path = root / "longmemeval" / "longmemeval_s_3.json"
    _write(path, [q, abstention])
    return path


def test_longmemeval_loader(tmp_path: Path) -> None:
    path = _longmemeval(tmp_path)
    questions, segments = load_longmemeval(tmp_path)
    assert load_longmemeval(path)[0] == questions
    assert [q.q_id for q in questions] == ["q1"]
    q = questions[0]
    assert (q.dataset, q.user, q.category, q.gold_sets) == ("longmemeval", "q1", "single-session-user", [["answer_1"]])
    assert [s.segment_id for s in segments["q1"]] == ["s1", "answer_1", "s3"]
    assert segments["q1"][1].text == '{"date":"d2","conversation":["I moved to Paris"]}'
    assert segments["q1"][2].text == '{"date":"d3","conversation":[]}'


def test_longmemeval_malformed(tmp_path: Path) -> None:
    path = _longmemeval(tmp_path)
    data = json.loads(path.read_text())
    data[0]["haystack_dates"] = ["d1"]
    _write(path, data)
    with pytest.raises(ValueError, match=r"longmemeval_s_3\.json: question 'q1'.*differ in length"):
        load_longmemeval(path)
    _write(path, [{"question_id": "q9"}])
    with pytest.raises(ValueError, match=r"longmemeval_s_3\.json: record 0 needs the fields"):
        load_longmemeval(path)
    with pytest.raises(ValueError, match="no LongMemEval file"):
        load_longmemeval(tmp_path / "missing")


@pytest.mark.realdata
@needs_personabench
def test_real_personabench() -> None:
    data = load_personabench(REAL)
    assert set(data.segments_by_user) == {"Kelly Simon", "Mrs. Nicole Mcdonald DDS", "Mr. Nicholas Richmond MD"}
    assert sum(len(s) for s in data.segments_by_user.values()) == 263
    assert len(data.questions) == 114 and data.skipped["subjective"] == 16
    counts = {c: sum(q.category == c for q in data.questions) for c in {q.category for q in data.questions}}
    assert counts == {"Basic information": 53, "Preference easy": 19, "Preference hard": 15, "Social": 27}
    assert set(data.expansions) == {q.q_id for q in data.questions}
    assert all(len(e.pseudo_utterances) == 10 and e.reasoning for e in data.expansions.values())
    ids = {s.segment_id for segs in data.segments_by_user.values() for s in segs}
    assert all(g in ids for q in data.questions for gold in q.gold_sets for g in gold)
    assert all('"segment_id"' not in s.text for segs in data.segments_by_user.values() for s in segs)


@pytest.mark.realdata
@needs_longmemeval
def test_real_longmemeval() -> None:
    questions, segments = load_longmemeval(REAL)
    assert len(questions) == 3
    for q in questions:
        assert 39 <= len(segments[q.q_id]) <= 41
        assert sorted(g[0] for g in q.gold_sets) == sorted(q.extra["answer_session_ids"])
