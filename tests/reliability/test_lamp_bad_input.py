"""Malformed LaMP files: each raises LampDataError naming the file and the offending record and field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from prag_models.data.lamp import LampDataError, load_lamp_split

TASK = "LaMP-2"
INPUT = "Which tag does this movie relate to among the following tags? tags: [comedy] description: A heist."


def _questions() -> list[dict]:
    """Three valid LaMP-2 questions."""
    return [
        {
            "id": f"q{i}",
            "input": INPUT,
            "user_id": f"u{i}",
            "profile": [
                {"id": f"d{i}a", "date": "2011-01-01", "description": "A dog.", "tag": "comedy"},
                {"id": f"d{i}b", "date": "2012-01-01", "description": "A war.", "tag": "violence"},
            ],
        }
        for i in range(3)
    ]


def _outputs() -> dict:
    """Golds matching _questions()."""
    return {"task": "LaMP_2", "golds": [{"id": f"q{i}", "output": "comedy"} for i in range(3)]}


Mutation = Callable[[list, dict], tuple[object, object]]


def _set(fn: Callable[[list, dict], None]) -> Mutation:
    """Wrap an in-place mutation of (questions, outputs) into one that returns them."""

    def mutate(questions: list, outputs: dict) -> tuple[object, object]:
        fn(questions, outputs)
        return questions, outputs

    return mutate


def _del(d: dict, key: str) -> None:
    """Delete a key (a statement-free helper for the lambdas below)."""
    del d[key]


# (case id, mutation, which file is blamed, substrings the message must contain)
CASES: list[tuple[str, Mutation, str, list[str]]] = [
    ("top_level_not_list", lambda q, o: ({"questions": q}, o), "q", ["top level", "field '<root>'", "list"]),
    ("record_not_object", _set(lambda q, o: q.__setitem__(1, "oops")), "q", ["record #1", "field '<record>'"]),
    ("missing_id", _set(lambda q, o: _del(q[2], "id")), "q", ["record #2", "field 'id'", "missing"]),
    ("missing_input", _set(lambda q, o: _del(q[1], "input")), "q", ["record id 'q1'", "field 'input'", "missing"]),
    ("input_wrong_type", _set(lambda q, o: q[1].__setitem__("input", 42)), "q", ["'q1'", "field 'input'", "int"]),
    ("empty_input", _set(lambda q, o: q[0].__setitem__("input", "  ")), "q", ["'q0'", "field 'input'", "empty"]),
    ("duplicate_sample_id", _set(lambda q, o: q[2].__setitem__("id", "q0")), "q", ["'q0'", "field 'id'", "duplicate"]),
    ("missing_profile", _set(lambda q, o: _del(q[1], "profile")), "q", ["'q1'", "field 'profile'", "missing"]),
    ("profile_not_list", _set(lambda q, o: q[1].__setitem__("profile", {})), "q", ["'q1'", "field 'profile'", "list"]),
    ("empty_profile", _set(lambda q, o: q[2].__setitem__("profile", [])), "q", ["'q2'", "field 'profile'", "empty"]),
    (
        "duplicate_doc_id",
        _set(lambda q, o: q[1]["profile"][1].__setitem__("id", "d1a")),
        "q",
        ["'q1'", "field 'profile[1].id'", "duplicate document id 'd1a'"],
    ),
    (
        "doc_missing_id",
        _set(lambda q, o: _del(q[0]["profile"][0], "id")),
        "q",
        ["'q0'", "field 'profile[0].id'", "missing"],
    ),
    (
        "doc_missing_task_field",
        _set(lambda q, o: _del(q[2]["profile"][1], "tag")),
        "q",
        ["'q2'", "field 'profile doc 'd2b'.tag'", "missing LaMP-2 field"],
    ),
    (
        "doc_field_wrong_type",
        _set(lambda q, o: q[0]["profile"][0].__setitem__("description", ["x"])),
        "q",
        ["'q0'", "profile doc 'd0a'.description", "list"],
    ),
    (
        "doc_date_wrong_type",
        _set(lambda q, o: q[0]["profile"][1].__setitem__("date", {"y": 1})),
        "q",
        ["'q0'", "profile doc 'd0b'.date", "dict"],
    ),
    ("user_id_wrong_type", _set(lambda q, o: q[1].__setitem__("user_id", [1])), "q", ["'q1'", "field 'user_id'"]),
    (
        "profile_tag_not_a_label",
        _set(lambda q, o: q[1]["profile"][0].__setitem__("tag", "horror")),
        "q",
        ["'q1'", "field 'profile doc 'd1a'.tag'", "'horror' is not a LaMP-2 label"],
    ),
    ("outputs_not_object", lambda q, o: (q, o["golds"]), "o", ["top level", "field '<root>'", "list"]),
    ("outputs_task_mismatch", _set(lambda q, o: o.__setitem__("task", "LaMP_3")), "o", ["field 'task'", "LaMP_3"]),
    ("outputs_task_missing", _set(lambda q, o: _del(o, "task")), "o", ["field 'task'", "missing"]),
    ("golds_not_list", _set(lambda q, o: o.__setitem__("golds", "x")), "o", ["field 'golds'", "list"]),
    ("gold_missing_output", _set(lambda q, o: _del(o["golds"][1], "output")), "o", ["gold id 'q1'", "field 'output'"]),
    (
        "gold_not_a_label",
        _set(lambda q, o: o["golds"][2].__setitem__("output", "horror")),
        "o",
        ["gold id 'q2'", "field 'output'", "'horror'"],
    ),
    ("duplicate_gold_id", _set(lambda q, o: o["golds"][2].__setitem__("id", "q0")), "o", ["'q0'", "field 'id'"]),
    (
        "ids_do_not_match",
        _set(lambda q, o: o["golds"][1].__setitem__("id", "zz")),
        "q",
        ["field 'id'", "1 question id(s) without a gold output (e.g. q1)", "1 gold id(s) without a question (e.g. zz)"],
    ),
]


@pytest.mark.parametrize(("mutation", "blamed", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_records(tmp_path: Path, mutation: Mutation, blamed: str, expected: list[str]) -> None:
    questions, outputs = mutation(_questions(), _outputs())
    qpath, opath = tmp_path / "dev_questions.json", tmp_path / "dev_outputs.json"
    qpath.write_text(json.dumps(questions), encoding="utf-8")
    opath.write_text(json.dumps(outputs), encoding="utf-8")
    with pytest.raises(LampDataError) as info:
        load_lamp_split(qpath, opath, TASK, "dev")
    message = str(info.value)
    assert str(qpath if blamed == "q" else opath) in message
    for part in expected:
        assert part in message, (part, message)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "dev_questions.json"
    with pytest.raises(LampDataError, match="file not found") as info:
        load_lamp_split(path, None, TASK, "dev")
    assert str(path) in str(info.value)


def test_non_utf8_bytes_report_offset(tmp_path: Path) -> None:
    path = tmp_path / "dev_questions.json"
    path.write_bytes(b'[{"id": "q0", "input": "caf\xe9"}]')
    with pytest.raises(LampDataError) as info:
        load_lamp_split(path, None, TASK, "dev")
    assert str(path) in str(info.value) and "byte offset 27" in str(info.value) and "0xe9" in str(info.value)


def test_invalid_json_reports_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "dev_questions.json"
    path.write_text('[\n  {"id": "q0",\n   "input": oops}\n]', encoding="utf-8")
    with pytest.raises(LampDataError) as info:
        load_lamp_split(path, None, TASK, "dev")
    assert str(path) in str(info.value) and "line 3 column 13" in str(info.value)


def test_invalid_json_in_outputs(tmp_path: Path) -> None:
    qpath, opath = tmp_path / "dev_questions.json", tmp_path / "dev_outputs.json"
    qpath.write_text(json.dumps(_questions()), encoding="utf-8")
    opath.write_text('{"task": "LaMP_2", "golds": [', encoding="utf-8")
    with pytest.raises(LampDataError) as info:
        load_lamp_split(qpath, opath, TASK, "dev")
    assert str(opath) in str(info.value) and "line 1" in str(info.value)


def test_unknown_task(tmp_path: Path) -> None:
    qpath = tmp_path / "dev_questions.json"
    qpath.write_text(json.dumps(_questions()), encoding="utf-8")
    with pytest.raises(LampDataError, match="unknown LaMP task 'LaMP-6'; known tasks: LaMP-1") as info:
        load_lamp_split(qpath, None, "LaMP-6", "dev")
    assert str(qpath) in str(info.value)


def test_lamp_data_error_is_value_error() -> None:
    assert issubclass(LampDataError, ValueError)


@pytest.mark.parametrize("score", ["abc", "6", "0", 6, 2.5])
def test_lamp3_profile_scores_must_be_ratings(tmp_path: Path, score: object) -> None:
    """LaMP-3 profile scores are integers 1–5 (as int or digit string); anything else names the file and the field."""
    questions = [{"id": "r1", "input": "What is the score of the following review on a scale of 1 to 5? review: ok",
                  "user_id": "u1", "profile": [{"id": "d1", "text": "fine", "score": score}]}]  # fmt: skip
    qpath = tmp_path / "dev_questions.json"
    qpath.write_text(json.dumps(questions), encoding="utf-8")
    with pytest.raises(LampDataError) as info:
        load_lamp_split(qpath, None, "LaMP-3", "dev")
    message = str(info.value)
    assert str(qpath) in message and "record id 'r1'" in message and "profile doc 'd1'.score" in message
