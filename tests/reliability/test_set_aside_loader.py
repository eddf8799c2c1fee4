"""Malformed LaMP records, library level: by default the first one stops the load with one error that names the file,
the record, the field, the allowed values and the setting that sets such records aside; with that setting
(``set_aside`` = a list) the load goes on without them and says, per record, what went and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prag_models.data.lamp import LampDataError, lamp_split_paths, load_lamp_split, load_lamp_task
from prag_models.data.set_aside import SetAside
from reliability.test_lamp_bad_input import CASES, _outputs, _questions

SETTING = ('data.malformed = "set_aside"', "PRAG__DATA__MALFORMED=set_aside")
#: Cases that are flaws of a whole file: there is no record to set aside, so they stop under either policy.
FILE_LEVEL = {"top_level_not_list", "outputs_not_object", "outputs_task_mismatch", "outputs_task_missing",
              "golds_not_list"}  # fmt: skip


def _write(folder: Path, questions: object, outputs: object) -> tuple[Path, Path]:
    """The questions and outputs files of a dev split."""
    qpath, opath = folder / "dev_questions.json", folder / "dev_outputs.json"
    qpath.write_text(json.dumps(questions), encoding="utf-8")
    opath.write_text(json.dumps(outputs), encoding="utf-8")
    return qpath, opath


def _flawed(folder: Path) -> tuple[Path, Path]:
    """Three LaMP-2 questions: q1's first profile tag in the wrong case, q2 a question with an empty input."""
    questions = _questions()
    questions[1]["profile"][0]["tag"] = "Comedy"
    questions[2]["input"] = ""
    return _write(folder, questions, _outputs())


def test_strict_load_stops_at_the_wrong_case_tag_and_names_the_setting(tmp_path: Path) -> None:
    qpath, opath = _flawed(tmp_path)
    with pytest.raises(LampDataError) as info:
        load_lamp_split(qpath, opath, "LaMP-2", "dev")
    message = str(info.value)
    for part in (str(qpath), "record id 'q1'", "field 'profile doc 'd1a'.tag'", "'Comedy' is not a LaMP-2 label",
                 "'comedy'", *SETTING):  # fmt: skip
        assert part in message, (part, message)


def test_set_aside_load_keeps_the_rest_and_says_what_went(tmp_path: Path) -> None:
    """The wrong-case tag drops only that document; the empty question drops its sample (and its gold with it)."""
    qpath, opath = _flawed(tmp_path)
    rows: list[SetAside] = []
    samples = load_lamp_split(qpath, opath, "LaMP-2", "dev", set_aside=rows)
    assert [s.sample_id for s in samples] == ["q0", "q1"]
    assert [d.doc_id for d in samples[1].profile] == ["d1b"] and len(samples[0].profile) == 2
    assert [s.gold for s in samples] == ["comedy", "comedy"]
    tag, question = rows
    assert (tag.task, tag.split, tag.file, tag.record_id, tag.user_id) == ("LaMP-2", "dev", str(qpath), "q1", "u1")
    assert tag.field == "profile doc 'd1a'.tag" and tag.dropped == "document"
    assert tag.reason.startswith("'Comedy' is not a LaMP-2 label [")
    assert (question.record_id, question.user_id, question.field, question.reason, question.dropped) == (
        "q2", "u2", "input", "is empty", "question")


def test_a_question_whose_every_document_is_malformed_goes(tmp_path: Path) -> None:
    questions = _questions()
    for doc in questions[0]["profile"]:
        doc["tag"] = "Horror"
    qpath, opath = _write(tmp_path, questions, _outputs())
    rows: list[SetAside] = []
    assert [s.sample_id for s in load_lamp_split(qpath, opath, "LaMP-2", "dev", set_aside=rows)] == ["q1", "q2"]
    (row,) = rows
    assert (row.record_id, row.field, row.dropped) == ("q0", "profile", "question")
    assert "every profile document is malformed" in row.reason and "'Horror'" in row.reason


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_every_record_level_flaw_is_set_aside_with_the_strict_errors_field_and_reason(tmp_path: Path,
                                                                                      name: str) -> None:  # fmt: skip
    """Each malformed-record case of the strict loader's tests: strict names the setting; set aside, the load goes on
    and a row blames the same file, field and problem as the strict error; a file-level flaw stops under both."""
    _, mutation, blamed, _ = next(c for c in CASES if c[0] == name)
    qpath, opath = _write(tmp_path, *mutation(_questions(), _outputs()))
    with pytest.raises(LampDataError) as info:
        load_lamp_split(qpath, opath, "LaMP-2", "dev")
    strict = str(info.value)
    rows: list[SetAside] = []
    if name in FILE_LEVEL:
        assert not any(part in strict for part in SETTING), strict
        with pytest.raises(LampDataError):
            load_lamp_split(qpath, opath, "LaMP-2", "dev", set_aside=rows)
        return
    assert all(part in strict for part in SETTING), strict
    samples = load_lamp_split(qpath, opath, "LaMP-2", "dev", set_aside=rows)
    assert rows and len(samples) >= 1
    assert {s.sample_id for s in samples} <= {"q0", "q1", "q2"}
    first = rows[0]
    assert first.file == str(qpath if blamed == "q" else opath)
    if name == "ids_do_not_match":  # the strict error sums up every id; a row per record says which is missing
        assert [(r.record_id, r.field, r.reason.split(" in ")[0], r.dropped) for r in rows] == [
            ("q1", "id", "no gold output", "question"), ("zz", "id", "no question with this id", "gold")]
        return
    assert f"field '{first.field}'" in strict and first.reason in strict, (first, strict)
    assert first.dropped in ("question", "document", "gold")


def test_a_sample_id_in_two_splits_is_set_aside_from_the_later_split(tmp_path: Path) -> None:
    train, dev = _questions(), _questions()
    for i, question in enumerate(dev):
        question["id"] = "q1" if i == 1 else f"p{i}"  # q1 is in both splits
    for split, questions in (("train", train), ("dev", dev)):
        qpath, opath = lamp_split_paths(tmp_path, "LaMP-2", split)
        qpath.parent.mkdir(parents=True)
        qpath.write_text(json.dumps(questions), encoding="utf-8")
        golds = [{"id": q["id"], "output": "comedy"} for q in questions]
        opath.write_text(json.dumps({"task": "LaMP_2", "golds": golds}), encoding="utf-8")
    with pytest.raises(LampDataError, match="duplicate sample id: also in") as info:
        load_lamp_task(tmp_path, "LaMP-2")
    assert SETTING[0] in str(info.value)
    rows: list[SetAside] = []
    splits = load_lamp_task(tmp_path, "LaMP-2", set_aside=rows)
    assert [s.sample_id for s in splits["train"]] == ["q0", "q1", "q2"]
    assert [s.sample_id for s in splits["dev"]] == ["p0", "p2"]
    (row,) = rows
    assert (row.split, row.record_id, row.user_id, row.field, row.dropped) == ("dev", "q1", "u1", "id", "question")
    assert row.file.endswith("dev_questions.json") and "also in" in row.reason and "train_questions.json" in row.reason


def test_a_split_with_no_question_left_stops(tmp_path: Path) -> None:
    questions = _questions()
    for question in questions:
        question["input"] = ""
    qpath, opath = _write(tmp_path, questions, _outputs())
    with pytest.raises(LampDataError, match="every question is malformed") as info:
        load_lamp_split(qpath, opath, "LaMP-2", "dev", set_aside=[])
    assert str(qpath) in str(info.value) and "'input': is empty" in str(info.value)
