"""Bad LaMP input through the real `lamp_samples` asset on a home that already holds a good materialization: each case
fails with one error naming the file, the record and the field, and NO table of the DuckDB file changes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import materialize_graph, partition_metadata, write_config

from reliability.helpers import copy_tree, table_checksums, write_lamp_folder

TASKS = ["LaMP-2", "LaMP-3"]
Files = dict[str, object]  # "<task> <split> questions|outputs" -> decoded JSON


def _path(root: Path, key: str) -> Path:
    """The file of a key such as "LaMP-3 dev questions"."""
    task, split, kind = key.split()
    return root / f"LaMP_{task[5:]}_time" / split / f"{split}_{kind}.json"


def _q(files: Files, task: str = "LaMP-2", split: str = "dev") -> list:
    return files[f"{task} {split} questions"]  # type: ignore[return-value]


def _o(files: Files, task: str = "LaMP-2", split: str = "dev") -> dict:
    return files[f"{task} {split} outputs"]  # type: ignore[return-value]


# Each case mutates the decoded files and returns (blamed file key, substrings the error must contain); a case may
# also return raw text for a file (key -> str) under "raw" to write bytes JSON cannot express.
Case = Callable[[Files], tuple[str, list[str]]]


def _score(value: object) -> Case:
    def case(f: Files) -> tuple[str, list[str]]:
        q = _q(f, "LaMP-3")[1]
        doc = q["profile"][0]
        doc["score"] = value
        return "LaMP-3 dev questions", [f"record id '{q['id']}'", f"profile doc '{doc['id']}'.score"]

    return case


def _doc_field(field: str, value: object, problem: str, task: str = "LaMP-2", split: str = "dev") -> Case:
    def case(f: Files) -> tuple[str, list[str]]:
        q = _q(f, task, split)[0]
        doc = q["profile"][1]
        doc[field] = value
        return f"{task} {split} questions", [f"record id '{q['id']}'", f"profile doc '{doc['id']}'.{field}", problem]

    return case


def _question(field: str, value: object, problem: str, record: str | None = None) -> Case:
    def case(f: Files) -> tuple[str, list[str]]:
        q = _q(f)[2]
        where = record or f"record id '{q['id']}'"
        q[field] = value
        return "LaMP-2 dev questions", [where, f"field '{field}'", problem]

    return case


def _drop(field: str) -> Case:
    def case(f: Files) -> tuple[str, list[str]]:
        q = _q(f)[1]
        del q[field]
        return "LaMP-2 dev questions", [f"record id '{q['id']}'", f"field '{field}'", "is missing"]

    return case


def _empty_questions(f: Files) -> tuple[str, list[str]]:
    f["LaMP-2 dev questions"] = []
    return "LaMP-2 dev questions", ["top level", "field '<root>'", "empty list"]


def _duplicate_across_files(f: Files) -> tuple[str, list[str]]:
    train, dev = _q(f, "LaMP-3", "train"), _q(f, "LaMP-3", "dev")
    old = dev[0]["id"]
    dev[0]["id"] = train[0]["id"]
    for gold in _o(f, "LaMP-3")["golds"]:
        if gold["id"] == old:
            gold["id"] = train[0]["id"]
    also = str(Path("LaMP_3_time") / "train" / "train_questions.json")
    return "LaMP-3 dev questions", [f"record id '{train[0]['id']}'", "field 'id'", "duplicate sample id: also in", also]


def _duplicate_in_file(f: Files) -> tuple[str, list[str]]:
    q = _q(f)
    q[2]["id"] = q[0]["id"]
    return "LaMP-2 dev questions", [f"record id '{q[0]['id']}'", "field 'id'", "duplicate sample id"]


def _duplicate_doc(f: Files) -> tuple[str, list[str]]:
    q = _q(f)[0]
    q["profile"][1]["id"] = q["profile"][0]["id"]
    return "LaMP-2 dev questions", [f"record id '{q['id']}'", "field 'profile[1].id'", "duplicate document id"]


def _gold(value: object, problem: str) -> Case:
    def case(f: Files) -> tuple[str, list[str]]:
        gold = _o(f)["golds"][1]
        gold["output"] = value
        return "LaMP-2 dev outputs", [f"gold id '{gold['id']}'", "field 'output'", problem]

    return case


def _gold_missing(f: Files) -> tuple[str, list[str]]:
    golds = _o(f)["golds"]
    gone = golds.pop(0)["id"]
    return "LaMP-2 dev questions", ["field 'id'", f"1 question id(s) without a gold output (e.g. {gone})"]


def _outputs_task(f: Files) -> tuple[str, list[str]]:
    _o(f)["task"] = "LaMP_3"
    return "LaMP-2 dev outputs", ["top level", "field 'task'", "'LaMP_3', expected LaMP-2"]


def _raw(key: str, text: str | bytes, problem: str) -> Case:
    def case(f: Files) -> tuple[str, list[str]]:
        f[key] = text
        return key, [problem]

    return case


def _surrogate_id(f: Files) -> tuple[str, list[str]]:
    q = _q(f)[1]
    q["id"] = "x\ud800"
    return "LaMP-2 dev questions", ["record #1", "field 'id'", "lone surrogate U+D800"]


def _nul_doc_id(f: Files) -> tuple[str, list[str]]:
    q = _q(f, "LaMP-3")[0]
    q["profile"][0]["id"] = "d\x00"
    return "LaMP-3 dev questions", [f"record id '{q['id']}'", "field 'profile[0].id'", "NUL character at position 1"]


def _surrogate_user(f: Files) -> tuple[str, list[str]]:
    q = _q(f, "LaMP-2", "train")[0]
    q["user_id"] = "\udfffu"
    return "LaMP-2 train questions", [f"record id '{q['id']}'", "field 'user_id'", "lone surrogate U+DFFF"]


CASES: dict[str, Case] = {
    # the cases
    "lamp3_score_abc": _score("abc"),
    "lamp3_score_6": _score(6),
    "lamp3_score_6_text": _score("6"),
    "lamp3_score_2.5": _score(2.5),
    "lamp3_score_bool": _score(True),
    "lamp2_tag_horror": _doc_field("tag", "horror", "'horror' is not a LaMP-2 label"),
    "unparseable_date": _doc_field("date", "31/31/2020", "'31/31/2020' is not a date in an accepted format"),
    "blank_date": _doc_field("date", " ", "is not a date in an accepted format"),
    "empty_question_list": _empty_questions,
    "surrogate_in_text": _doc_field("description", "caf\ud800", "lone surrogate U+D800 at position 3"),
    "nul_in_input": _question("input", "Which tag? description: a\x00b", "NUL character at position 25"),
    "duplicate_ids_across_files": _duplicate_across_files,
    # more text that cannot be stored
    "surrogate_in_sample_id": _surrogate_id,
    "nul_in_doc_id": _nul_doc_id,
    "surrogate_in_user_id": _surrogate_user,
    "surrogate_in_date": _doc_field("date", "2012-\ud800", "lone surrogate", "LaMP-3", "train"),
    "surrogate_in_gold": _gold("comedy\ud800", "lone surrogate"),
    # the loader's existing cases
    "gold_not_a_label": _gold("horror", "'horror' is not a LaMP-2 label"),
    "gold_missing": _gold_missing,
    "outputs_task_mismatch": _outputs_task,
    "invalid_json": _raw("LaMP-2 dev questions", '[{"id": "1",', "invalid JSON at line 1"),
    "not_utf8": _raw("LaMP-3 train questions", b'[{"id": "caf\xe9"}]', "not valid UTF-8: byte 0xe9"),
    "top_level_not_list": _raw("LaMP-2 train questions", '{"questions": []}', "must be a list of questions"),
    "missing_input": _drop("input"),
    "missing_profile": _drop("profile"),
    "empty_input": _question("input", "   ", "is empty"),
    "input_wrong_type": _question("input", 42, "wrong type int"),
    "user_id_wrong_type": _question("user_id", [1], "must be a non-empty string or int"),
    "empty_profile": _question("profile", [], "is empty"),
    "duplicate_sample_id": _duplicate_in_file,
    "duplicate_doc_id": _duplicate_doc,
    "doc_tag_null": _doc_field("tag", None, "wrong type NoneType"),
    "doc_date_wrong_type": _doc_field("date", {"y": 2012}, "wrong type dict"),
}


#: Flaws of a whole file: no record to set aside, so their error does not offer data.malformed = "set_aside".
FILE_LEVEL = {"empty_question_list", "invalid_json", "not_utf8", "top_level_not_list", "outputs_task_mismatch"}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A home holding a good materialization of lamp_samples and profile_documents from a LaMP folder."""
    tmp = tmp_path_factory.mktemp("bad_input")
    lamp = write_lamp_folder(tmp / "lamp_good", tuple(TASKS))
    home = tmp / "home"
    config = write_config(tmp / "good.toml", home, generator_backend="fake", data={"source": "lamp",
                          "lamp_dir": str(lamp), "tasks": TASKS})  # fmt: skip
    result = materialize_graph(config, TASKS, selection=["lamp_samples", "profile_documents"])
    assert result.success
    db = home / "prag.duckdb"
    before = table_checksums(db)
    assert before["lamp_samples"][0] > 0 and before["profile_documents"][0] > 0
    return {"tmp": tmp, "lamp": lamp, "home": home, "db": db, "before": before}


def _corrupt(good_dir: Path, target: Path, case: Case) -> tuple[Path, list[str]]:
    """Copy the good LaMP folder, apply the case; (blamed file, expected substrings)."""
    root = copy_tree(good_dir, target)
    keys = [f"{t} {s} {k}" for t in TASKS for s in ("train", "dev") for k in ("questions", "outputs")]
    files: Files = {k: json.loads(_path(root, k).read_text(encoding="utf-8")) for k in keys}
    original = repr(files)
    blamed, expected = case(files)
    assert repr(files) != original, "the case changed nothing"
    for key, value in files.items():
        if isinstance(value, bytes):
            _path(root, key).write_bytes(value)
        elif isinstance(value, str):
            _path(root, key).write_text(value, encoding="utf-8")
        else:
            _path(root, key).write_text(json.dumps(value), encoding="utf-8")  # ensure_ascii: "\ud800" stays escaped
    return _path(root, blamed), expected


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_fails_clearly_and_changes_no_table(good: dict, name: str) -> None:
    tmp: Path = good["tmp"]  # type: ignore[assignment]
    blamed, expected = _corrupt(good["lamp"], tmp / f"lamp_{name}", CASES[name])  # type: ignore[arg-type]
    config = write_config(tmp / f"{name}.toml", good["home"], generator_backend="fake",
                          data={"source": "lamp", "lamp_dir": str(blamed.parents[2]), "tasks": TASKS})  # fmt: skip
    result = materialize_graph(config, TASKS, selection=["lamp_samples"], raise_on_error=False)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    message = failure.event_specific_data.error.to_string()
    assert "LampDataError" in message and str(blamed) in message, message
    for part in expected:
        assert part in message, (part, message)
    assert ('data.malformed = "set_aside"' in message) == (name not in FILE_LEVEL), message
    message.encode("utf-8")  # the error itself is printable (no lone surrogate, escaped NUL)
    assert table_checksums(good["db"]) == good["before"]  # type: ignore[arg-type]


def test_enough_cases() -> None:
    assert len(CASES) >= 24


def test_undated_keep_policy_keeps_and_counts(good: dict, tmp_path: Path) -> None:
    """data.undated = "keep": an unparseable date is kept undated, and lamp_samples' metadata counts it."""
    lamp = copy_tree(good["lamp"], tmp_path / "lamp")  # type: ignore[arg-type]
    path = _path(lamp, "LaMP-2 dev questions")
    questions = json.loads(path.read_text(encoding="utf-8"))
    questions[0]["profile"][0]["date"] = "sometime in spring"
    path.write_text(json.dumps(questions), encoding="utf-8")
    data = {"source": "lamp", "lamp_dir": str(lamp), "tasks": TASKS, "undated": "keep"}
    config = write_config(tmp_path / "keep.toml", tmp_path / "home", generator_backend="fake", data=data)
    result = materialize_graph(config, TASKS, selection=["lamp_samples"])
    by_task = partition_metadata(result, "lamp_samples")  # each task partition its own counts
    assert {task: m["undated_policy"] for task, m in by_task.items()} == {"LaMP-2": "keep", "LaMP-3": "keep"}
    assert {task: m["undated_documents"] for task, m in by_task.items()} == {"LaMP-2": 1, "LaMP-3": 0}
