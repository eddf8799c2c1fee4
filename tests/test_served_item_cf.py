"""item_cf served (`prag answer`, prag_models/mlops/serving.py): it retrieves what the evaluation retrieved, with the
task's tuned knobs, and its prompt says how many users wrote each collapsed text."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pandas as pd
from conftest import EVALUATED_TASK, store_copy

from prag_models.config.settings import GeneratorSettings, load_settings
from prag_models.llm.factory import make_generator
from prag_models.mlops import serving


def _unit(v: list[float]) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_item_cf_is_served_with_its_counts_in_the_prompt() -> None:
    """Three users gave item x the tag comedy, one drama: the answer shows "(3 users)" in front of comedy, names every
    writer as the answer's provenance and prints the count; the asker sees no user's unshared copy."""
    texts = ["'description': x 'tag': comedy"] * 3 + ["'description': x 'tag': drama", "'description': y 'tag': drama",
                                                      "'description': x 'tag': comedy"]  # fmt: skip
    vectors = [_unit([1, 0.1, 0]), _unit([1, 0.1, 0]), _unit([1, 0.1, 0]), _unit([1, 0, 0.1]), _unit([0, 1, 0]),
               _unit([1, 0.1, 0])]  # fmt: skip
    fields = [json.dumps({"description": t.split("'")[2].strip(": "), "tag": t.split("'")[4].strip(": ")})
              for t in texts]  # fmt: skip
    docs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(6)], "user_id": ["b", "c", "d", "e", "f", "g"],
                         "text": texts, "fields_json": fields, "embedding": [v.tolist() for v in vectors],
                         "shareable": [True, True, True, True, True, False]})  # fmt: skip
    documents = serving.task_documents("LaMP-2", docs)
    settings = load_settings(environ={}, generator={"backend": "fake"}, retrieval={"k": 2})
    user_vectors = {u: _unit([1, 0]) for u in "abcdefg"}
    user = serving.item_cf_user("a", user_vectors, "content")
    generator = make_generator(GeneratorSettings(backend="fake"))
    with duckdb.connect(":memory:") as con:
        result = serving.answer("LaMP-2", "item_cf", "description: x", user, documents, _unit([1, 0, 0]), settings,
                                generator, con, {"user_vectors": user_vectors})  # fmt: skip
    assert [r.writers for r in result.retrieved] == [3, 1]  # g's unshared copy is not counted for a
    assert result.documents[0] == f"(3 users) {texts[0]}" and result.documents[1] == texts[3]
    assert "(3 users) 'description': x 'tag': comedy" in result.prompt
    assert serving.shown_users(documents.index, "a", result.retrieved) == ["b", "e", "c", "d"]
    assert "written by 3 users" in serving.format_answer(result)


def test_prag_answer_serves_item_cf_as_it_was_evaluated(evaluated_graph, tmp_path) -> None:
    """answer_once (what `prag answer --method item_cf` runs) retrieves for a dev sample exactly the item_cf rows of
    clusterrag_retrievals (tuned knobs, the same user vectors), a known user with a vector, a new one without."""
    from prag_models.mlops.answer_once import answer_once

    config, home, _ = evaluated_graph
    settings = load_settings(config)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        sample_id, user_id, text = con.execute(
            "SELECT sample_id, user_id, input FROM lamp_samples WHERE task = ? AND split = 'dev' ORDER BY sample_id "
            "LIMIT 1", [EVALUATED_TASK]).fetchone()  # fmt: skip
        stored = con.execute(
            "SELECT doc_id, source_user_id, writers FROM clusterrag_retrievals WHERE task = ? AND method = 'item_cf' "
            "AND sample_id = ? ORDER BY rank", [EVALUATED_TASK, sample_id]).fetchall()  # fmt: skip
        result = answer_once(con, settings, EVALUATED_TASK, user_id, "item_cf", text)
        new = answer_once(con, settings, EVALUATED_TASK, "nobody-new", "item_cf", text)
    assert stored and [(r.doc_id, r.source_user_id, r.writers) for r in result.retrieved] == stored
    assert not result.user.cold_start and result.output and new.user.cold_start and new.retrieved
    assert "item_cf" in result.user.how and "new user" in new.user.how
