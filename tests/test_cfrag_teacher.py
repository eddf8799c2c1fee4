"""CFRAG's teacher of known quality (cfrag.feedback_signal = "oracle", docs/methods.md §2.5): labels are the truth,
a share teacher_noise of them random, keyed apart from LLM labels and needing no LLM work."""

from __future__ import annotations

from types import SimpleNamespace

import duckdb
import numpy as np
import pytest


def _world() -> duckdb.DuckDBPyConnection:
    """A task with 40 train samples, 5 documents each, the first document of each relevant."""
    con = duckdb.connect()
    con.execute("CREATE TABLE lamp_samples (task VARCHAR, sample_id VARCHAR, input VARCHAR, gold VARCHAR, "
                "split VARCHAR)")  # fmt: skip
    con.execute("CREATE TABLE relevance_labels (task VARCHAR, sample_id VARCHAR, doc_id VARCHAR)")
    for i in range(40):
        con.execute("INSERT INTO lamp_samples VALUES ('LaMP-4', ?, 'x', 'y', 'train')", [f"s{i}"])
        con.execute("INSERT INTO relevance_labels VALUES ('LaMP-4', ?, ?)", [f"s{i}", f"s{i}d0"])
    return con


def _pairs() -> list:
    return [(SimpleNamespace(sample_id=f"s{i}"), SimpleNamespace(doc_id=f"s{i}d{j}")) for i in range(40)
            for j in range(5)]  # fmt: skip


def test_the_oracle_teacher_labels_the_truth_with_the_configured_noise() -> None:
    from prag_models.config.settings import load_settings
    from prag_models.methods.cfrag.feedback_labels import feedback_prompt_version, score_range
    from prag_models.methods.cfrag.teacher import oracle_scores

    con, pairs = _world(), _pairs()
    truth = np.array([float(c.doc_id.endswith("d0")) for _, c in pairs])

    def settings(noise: float):  # noqa: ANN202
        return load_settings(environ={"PRAG__CFRAG__FEEDBACK_SIGNAL": "oracle",
                                      "PRAG__CFRAG__TEACHER_NOISE": str(noise)})  # fmt: skip

    clean = np.array(oracle_scores(con, "LaMP-4", pairs, settings(0.0)))
    np.testing.assert_array_equal(clean, truth)
    half = np.array(oracle_scores(con, "LaMP-4", pairs, settings(0.5)))
    replaced = half != truth
    assert 0.35 < replaced.mean() < 0.65 and ((half >= 0) & (half <= 1)).all()
    # a label depends on its pair only: the same in any order or batch
    np.testing.assert_array_equal(np.array(oracle_scores(con, "LaMP-4", pairs[::-1], settings(0.5)))[::-1], half)
    noisy = np.array(oracle_scores(con, "LaMP-4", pairs, settings(1.0)))
    assert (noisy != truth).mean() > 0.95  # a teacher that knows nothing
    versions = {feedback_prompt_version("LaMP-4", settings(n)) for n in (0.0, 0.5, 1.0)}
    assert len(versions) == 3 and feedback_prompt_version("LaMP-4", load_settings(environ={})) not in versions
    assert score_range("LaMP-4", "oracle") == (0.0, 1.0)


def test_the_oracle_teacher_needs_no_llm_work() -> None:
    """The cache-fill stage plans no LLM prompts for oracle labels (the generator is never built)."""
    from prag_models.config.settings import load_settings
    from prag_models.stages.cache_work import feedback_work

    settings = load_settings(environ={"PRAG__CFRAG__FEEDBACK_SIGNAL": "oracle"})
    models = SimpleNamespace(generator=lambda: (_ for _ in ()).throw(AssertionError("generator built")))
    assert feedback_work(None, "LaMP-4", settings, models) == []


def test_the_training_loop_learns_from_a_perfect_teacher_and_not_from_noise(tmp_path) -> None:
    """benchmarks/cfrag_teacher.py on a small world (LaMP-2): with a noiseless oracle the trained retriever and the
    trained reranker each beat their initialisation on held-out dev pools (paired 95 % interval above 0; the
    retriever's α moved), the gate kept a trained epoch; with a teacher that knows nothing (noise 1) the gate keeps
    the retriever's initialisation."""
    import sys

    from conftest import ROOT

    from prag_models.config.settings import load_settings

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import cfrag_teacher as bench

    # the product's training length (30 epochs, early stopping): the frozen cross-encoder makes it seconds
    config = bench.build_world(tmp_path, users=160, communities=4, dev=32, tasks=["LaMP-2"],
                               cfrag={"reranker_max_length": 64, "train_epochs": 30})  # fmt: skip
    settings = load_settings(config)
    con = duckdb.connect(str(settings.duckdb_path))
    try:
        clean = bench.run_task(con, "LaMP-2", settings, 0.0, kinds=("retriever", "reranker"))
        noise = bench.run_task(con, "LaMP-2", settings, 1.0, kinds=("retriever",))
    finally:
        con.close()
    trained, init, est, gate = clean["retriever"]
    assert gate.startswith("epoch") and est.low > 0 and trained > init, (est, gate)
    assert clean["alpha"] != pytest.approx(settings.cfrag.alpha, abs=1e-3)
    trained, init, est, gate = clean["reranker"]
    assert gate.startswith("epoch") and est.low > 0 and trained > init, (est, gate)
    trained, init, est, gate = noise["retriever"]
    assert trained == init and est.value == 0.0, gate  # the gate (or selection) kept the initialisation
