"""Loading valid LaMP files: all six tasks, rendering, query extraction, date order, derived user ids, gold=None."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from prag_models.data.lamp import (
    LampDataError,
    LampSample,
    derive_user_id,
    lamp_split_paths,
    load_lamp_split,
    load_lamp_task,
    parse_date,
)
from prag_models.data.tasks import (
    INPUT_TEMPLATES,
    LAMP2_TAGS,
    PROFILE_FIELDS,
    TASKS,
    extract_query,
    render_document,
    task_from_name,
)

INPUTS = {
    "LaMP-1": 'For an author who has written the paper with the title "Deep nets", which reference is related? '
    'Just answer with [1] or [2] without explanation. [1]: "Graph kernels" [2]: "Sparse coding, revisited"',
    "LaMP-2": "Which tag does this movie relate to among the following tags? Just answer with the tag name without "
    "further explanation. tags: [" + ", ".join(LAMP2_TAGS) + "] description: A robot falls in love.",
    "LaMP-3": "What is the score of the following review on a scale of 1 to 5? just answer with 1, 2, 3, 4, or 5 "
    "without further explanation. review: Great blender, a bit loud.",
    "LaMP-4": "Generate a headline for the following article: Markets rallied on Monday after the vote.",
    "LaMP-5": "Generate a title for the following abstract of a paper: We study sparse attention.",
    "LaMP-7": "Paraphrase the following tweet without any explanation before or after it: off to the beach: finally",
}
QUERIES = {
    "LaMP-1": "Graph kernels Sparse coding, revisited",
    "LaMP-2": "A robot falls in love.",
    "LaMP-3": "Great blender, a bit loud.",
    "LaMP-4": "Markets rallied on Monday after the vote.",
    "LaMP-5": "We study sparse attention.",
    "LaMP-7": "off to the beach: finally",
}
GOLDS = {
    "LaMP-1": "[2]",
    "LaMP-2": "sci-fi",
    "LaMP-3": "4",
    "LaMP-4": "Stocks up",
    "LaMP-5": "Sparse",
    "LaMP-7": "beach",
}
FIELD_VALUES = {
    "title": "T",
    "abstract": "A",
    "description": "D",
    "tag": "comedy",
    "text": "X",
    "score": "5",
}


def _doc(task: str, doc_id: str | int, date: str | None = None) -> dict:
    """A profile document with every field of the task."""
    doc: dict = {"id": doc_id, **{f: f"{FIELD_VALUES[f]}{doc_id}" for f in PROFILE_FIELDS[task]}}
    if task == "LaMP-3":
        doc["score"] = "5"
    if task == "LaMP-2":
        doc["tag"] = "comedy"
    if date is not None:
        doc["date"] = date
    return doc


def _write(folder: Path, split: str, task: str, questions: list, golds: list | None) -> tuple[Path, Path | None]:
    """Write a split's questions (and outputs, unless golds is None)."""
    folder.mkdir(parents=True, exist_ok=True)
    qpath = folder / f"{split}_questions.json"
    qpath.write_text(json.dumps(questions), encoding="utf-8")
    if golds is None:
        return qpath, None
    opath = folder / f"{split}_outputs.json"
    opath.write_text(json.dumps({"task": task.replace("-", "_"), "golds": golds}), encoding="utf-8")
    return qpath, opath


@pytest.mark.parametrize("task", TASKS)
def test_load_each_task(tmp_path: Path, task: str) -> None:
    profile = [_doc(task, 1, "2020-01-01"), _doc(task, 2)]
    questions = [{"id": 10, "input": INPUTS[task], "user_id": 7, "profile": profile}]
    qpath, opath = _write(tmp_path, "dev", task, questions, [{"id": "10", "output": GOLDS[task]}])
    (sample,) = load_lamp_split(qpath, opath, task.replace("-", "_"), "dev")
    assert isinstance(sample, LampSample)
    assert (sample.task, sample.split, sample.sample_id, sample.user_id) == (task, "dev", "10", "7")
    assert sample.input == INPUTS[task]
    assert sample.query == QUERIES[task]
    assert sample.gold == GOLDS[task]
    assert [d.doc_id for d in sample.profile] == ["1", "2"]
    first = sample.profile[0]
    assert first.date == "2020-01-01" and sample.profile[1].date is None
    assert set(first.fields) == set(PROFILE_FIELDS[task])
    assert first.text == render_document(task, first.fields)


def test_render_document_exact_strings() -> None:
    f = {"title": "T", "abstract": "A", "description": "D", "tag": "comedy", "text": "X", "score": "4"}
    assert render_document("LaMP-1", f) == "'title': T 'abstract': A"
    assert render_document("LaMP-2", f) == "'description': D 'tag': comedy"
    assert render_document("LaMP-3", f) == "X"
    assert render_document("LaMP-4", f) == "'text': X 'title': T"
    assert render_document("LaMP-5", f) == "'abstract': A 'title': T"
    assert render_document("LaMP-7", f) == "X"
    with pytest.raises(LampDataError, match="tag"):
        render_document("LaMP-2", {"description": "D"})


@pytest.mark.parametrize("task", TASKS)
def test_extract_query_real_templates_and_fallback(task: str) -> None:
    assert extract_query(task, INPUTS[task]) == QUERIES[task]
    assert extract_query(task, "  no marker here  ") == "no marker here"


@pytest.mark.parametrize("task", TASKS)
def test_input_templates_round_trip(task: str) -> None:
    text = INPUT_TEMPLATES[task].format(x="the body: with a colon", t="Mine", a="Ref A", b="Ref B")
    if task == "LaMP-1":
        assert extract_query(task, text) == "Ref A Ref B"
    else:
        assert text == INPUTS[task].replace(QUERIES[task], "the body: with a colon")
        assert extract_query(task, text) == "the body: with a colon"


def test_extract_query_lamp5_abstract_marker() -> None:
    assert extract_query("LaMP-5", "Write a title. abstract: We do X.") == "We do X."


def test_task_from_name() -> None:
    for name in ("LaMP-2", "LaMP_2", "lamp2", "2", "LaMP_2_time", " lamp-2 "):
        assert task_from_name(name) == "LaMP-2"
    assert task_from_name(7) == "LaMP-7"
    for bad in ("LaMP-6", "lamp", "foo", "8"):
        with pytest.raises(LampDataError, match="LaMP-1, LaMP-2"):
            task_from_name(bad)


def test_profile_sorted_by_date_stable_with_undated_last(tmp_path: Path) -> None:
    dates = ["2015-03-01", None, "2012", "Mon Apr 06 22:19:45 PDT 2009", "2015-03-01", None, "not a date", "2014-07"]
    docs = [_doc("LaMP-7", f"d{i}", d) for i, d in enumerate(dates)]
    qpath, _ = _write(
        tmp_path, "dev", "LaMP-7", [{"id": "1", "input": INPUTS["LaMP-7"], "user_id": "u", "profile": docs}], None
    )
    (sample,) = load_lamp_split(qpath, None, "LaMP-7", "dev", undated="keep")  # "not a date" kept as undated
    assert [d.doc_id for d in sample.profile] == ["d3", "d2", "d7", "d0", "d4", "d1", "d5", "d6"]


def test_parse_date_formats() -> None:
    assert parse_date("2014") == datetime(2014, 1, 1)
    assert parse_date("2014-05") == datetime(2014, 5, 1)
    assert parse_date("2014-05-06") == datetime(2014, 5, 6)
    assert parse_date("2014-05-06T10:00:00Z") == datetime(2014, 5, 6, 10)
    assert parse_date("Mon Apr 06 22:19:45 +0000 2009") == datetime(2009, 4, 6, 22, 19, 45)
    assert parse_date("Mon Apr 06 22:19:45 PDT 2009") == datetime(2009, 4, 6, 22, 19, 45)
    assert parse_date("Tue, 07 Apr 2009 05:19:45 +0000") == datetime(2009, 4, 7, 5, 19, 45)
    assert parse_date("March 3, 2011") == datetime(2011, 3, 3)
    assert parse_date(2010) == datetime(2010, 1, 1)
    assert parse_date("") is None and parse_date(None) is None and parse_date("soon") is None


def test_original_split_derives_stable_user_ids(tmp_path: Path) -> None:
    task = "LaMP-4"
    qpath, opath = lamp_split_paths(tmp_path, task, "dev", split_kind="original")
    assert qpath == tmp_path / "LaMP_4" / "dev" / "dev_questions.json"
    assert opath == tmp_path / "LaMP_4" / "dev" / "dev_outputs.json"
    questions = [
        {"id": "a", "input": INPUTS[task], "profile": [_doc(task, "x"), _doc(task, "y")]},
        {"id": "b", "input": INPUTS[task], "profile": [_doc(task, "y"), _doc(task, "x")]},
        {"id": "c", "input": INPUTS[task], "profile": [_doc(task, "z")]},
    ]
    _write(qpath.parent, "dev", task, questions, [{"id": i, "output": "h"} for i in "abc"])
    samples = load_lamp_task(tmp_path, task, splits=("dev",), split_kind="original")["dev"]
    a, b, c = samples
    assert a.user_id == b.user_id == derive_user_id(["x", "y"]) and a.user_id != c.user_id
    assert a.user_id.startswith("p") and len(a.user_id) == 13
    int(a.user_id[1:], 16)


def test_time_split_question_without_user_id_is_an_error_naming_file_and_record(tmp_path: Path) -> None:
    """A time split is keyed by user: a question without user_id would silently get a derived id and be cut from
    the user's other questions and neighbours, so loading fails and names the file and the record."""
    task = "LaMP-4"
    qpath, _ = lamp_split_paths(tmp_path, task, "dev")
    questions = [
        {"id": "a", "input": INPUTS[task], "user_id": "u1", "profile": [_doc(task, "x")]},
        {"id": "b", "input": INPUTS[task], "profile": [_doc(task, "y")]},
    ]
    _write(qpath.parent, "dev", task, questions, [{"id": i, "output": "h"} for i in "ab"])
    with pytest.raises(LampDataError, match=r"dev_questions\.json: record id 'b': field 'user_id': is missing"):
        load_lamp_task(tmp_path, task, splits=("dev",))


def test_original_split_marks_derived_user_ids(tmp_path: Path) -> None:
    """The original split asks for derived ids: each sample says whether its user id was derived (counted in the
    lamp_samples metadata), a stated user_id is kept as is."""
    task = "LaMP-4"
    qpath, _ = lamp_split_paths(tmp_path, task, "dev", split_kind="original")
    questions = [
        {"id": "a", "input": INPUTS[task], "profile": [_doc(task, "x")]},
        {"id": "b", "input": INPUTS[task], "user_id": "u9", "profile": [_doc(task, "y")]},
    ]
    _write(qpath.parent, "dev", task, questions, [{"id": i, "output": "h"} for i in "ab"])
    a, b = load_lamp_task(tmp_path, task, splits=("dev",), split_kind="original")["dev"]
    assert (a.derived_user_id, b.derived_user_id, b.user_id) == (True, False, "u9")


def test_time_split_paths() -> None:
    q, o = lamp_split_paths("/r", "lamp2", "train")
    assert q == Path("/r/LaMP_2_time/train/train_questions.json")
    assert o == Path("/r/LaMP_2_time/train/train_outputs.json")
    with pytest.raises(LampDataError, match="split_kind"):
        lamp_split_paths("/r", "LaMP-2", "dev", split_kind="weird")


def test_unlabeled_split_has_gold_none(tmp_path: Path) -> None:
    task = "LaMP-2"
    questions = [{"id": "1", "input": INPUTS[task], "user_id": "u1", "profile": [_doc(task, "d")]}]
    train, _ = lamp_split_paths(tmp_path, task, "train")
    test, _ = lamp_split_paths(tmp_path, task, "test")
    _write(train.parent, "train", task, questions, [{"id": "1", "output": "comedy"}])
    _write(test.parent, "test", task, [{**questions[0], "id": "2"}], None)  # sample ids are unique across splits
    loaded = load_lamp_task(tmp_path, task, splits=("train", "test"))
    assert loaded["train"][0].gold == "comedy"
    assert loaded["test"][0].gold is None and loaded["test"][0].split == "test"


def test_numeric_ids_and_scores_are_normalised(tmp_path: Path) -> None:
    task = "LaMP-3"
    doc = {"id": 5, "text": "fine", "score": 4, "date": 2019}
    questions = [{"id": 3, "input": INPUTS[task], "user_id": "u", "profile": [doc]}]
    qpath, opath = _write(tmp_path, "dev", task, questions, [{"id": 3, "output": 2}])
    (sample,) = load_lamp_split(qpath, opath, task, "dev")
    assert sample.sample_id == "3" and sample.gold == "2"
    assert sample.profile[0].doc_id == "5" and sample.profile[0].fields == {"text": "fine", "score": "4"}
    assert sample.profile[0].date == "2019"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    task = "LaMP-7"
    qpath = tmp_path / "dev_questions.json"
    body = json.dumps([{"id": "1", "input": INPUTS[task], "user_id": "u", "profile": [_doc(task, "d")]}])
    qpath.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    assert load_lamp_split(qpath, None, task, "dev")[0].sample_id == "1"
