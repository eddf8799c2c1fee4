"""Promotion on a small materialized graph with the fake generator: the challenger's evaluation recorded, `prag
promote` / `prag rollback` / `prag answer` through the CLI, and the served champion bundle."""

import pytest
from test_promotion import TASK, _champions, _tags

from prag_models.mlops import promotion, registry

GRAPH_CFRAG = {"epochs": 10, "reranker_layers": 1, "reranker_max_length": 64, "validation_share": 0.0}
GRAPH_METHODS = ["zero_shot", "clusterrag_collaborative", "clusterrag_hybrid", "cfrag"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """LaMP-2 materialized up to cfrag_model_evaluation with the fake generator (once for the module)."""
    import dagster as dg
    from conftest import materialize_graph, write_config

    tmp = tmp_path_factory.mktemp("graph")
    config = write_config(tmp / "prag.toml", tmp / "home", generator_backend="fake", data={"tasks": [TASK]},
                          cfrag=GRAPH_CFRAG, retrieval={"methods": GRAPH_METHODS},
                          utility={"pilot_samples": 2, "min_samples": 2})  # fmt: skip
    selection = dg.AssetSelection.assets("cfrag_model_evaluation").upstream()
    result = materialize_graph(config, [TASK], selection=selection)
    return config, result


def _cli(monkeypatch, capsys, config, *argv: str) -> tuple[int, str, str]:
    from prag_assets.cli import main

    monkeypatch.setenv("PRAG_CONFIG", str(config))
    monkeypatch.setenv("USER", "tester")
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_graph_records_challenger_evaluation_and_answers(graph, monkeypatch, capsys) -> None:
    import duckdb

    from prag_models.config.settings import load_settings

    config, result = graph
    assert result.success
    checks = {e.event_specific_data.check_name: e.event_specific_data.passed
              for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}  # fmt: skip
    assert checks["recorded_metrics_in_bounds"] and checks["retrieved_docs_allowed"]
    settings = load_settings(config)
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        bundle = con.execute("SELECT * FROM cfrag_retrieval_models ORDER BY kind").df()
        accuracy = con.execute(
            "SELECT value FROM lamp_evaluation WHERE task = ? AND method = 'cfrag' AND metric = 'accuracy'", [TASK]
        ).fetchone()[0]
        known = con.execute("SELECT user_id FROM cfrag_user_embeddings ORDER BY user_id LIMIT 1").fetchone()[0]
        sample = con.execute("SELECT input FROM lamp_samples WHERE split = 'dev' LIMIT 1").fetchone()[0]
    assert set(bundle["kind"]) == set(promotion.KINDS) and set(bundle["version"]) == {1}
    assert set(bundle[bundle["kind"] != "user_encoder"]["loaded_by"]) == {"alias challenger"}
    target = promotion.mlflow_target(settings)
    for kind in promotion.KINDS:
        tags = _tags(target, kind, 1)
        assert tags["eval.bundle.accuracy"] == f"{accuracy:.4g}" and tags["eval.method"] == "cfrag"

    code, out, _ = _cli(monkeypatch, capsys, config, "answer", "--task", TASK, "--user", known, "--input", sample)
    assert code == 0, out
    assert "known user" in out and "@champion (version 1)" in out and "from user" in out and "answer: " in out
    code, out, _ = _cli(monkeypatch, capsys, config, "answer", "--task", TASK, "--user", "nobody-new", "--input",
                        sample, "--method", "clusterrag_collaborative")  # fmt: skip
    assert code == 0 and "new user" in out and "cold start" in out and "answer: " in out
    code, out, _ = _cli(monkeypatch, capsys, config, "answer", "--task", TASK, "--user", "nobody-new", "--input",
                        sample, "--method", "cfrag")  # fmt: skip
    assert code == 0 and "new user" in out and "empty history" in out
    from prag_models.mlops.answer_once import answer_once  # the same answer without the CLI (plain library call)

    with duckdb.connect(str(settings.duckdb_path)) as con:
        direct = answer_once(con, settings, TASK, known, "cfrag", sample)
    assert direct.models["retriever"].endswith("@champion (version 1)") and direct.retrieved and direct.output

    # v1 is champion and challenger: nothing to promote (exit 1, recorded); no promotion yet: no rollback (exit 2)
    code, out, _ = _cli(monkeypatch, capsys, config, "promote", "--task", TASK, "--reason", "first")
    assert code == 1 and "already champion" in out
    code, _, err = _cli(monkeypatch, capsys, config, "rollback", "--task", TASK, "--reason", "oops")
    assert code == 2 and "nothing to roll back to" in err
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        rows = con.execute("SELECT action, actor, reason FROM model_promotions").df()
    assert len(rows) == 4 and set(rows["action"]) == {"refused"} and set(rows["actor"]) == {"tester"}


def test_graph_retrained_challenger_is_evaluated_promoted_and_rolled_back(graph, monkeypatch, capsys) -> None:
    """After the test above (same graph): retrain the retriever, evaluate v2 by alias, promote, serve, roll back."""
    import dagster as dg
    import duckdb
    from conftest import materialize_graph

    from prag_models.config.settings import load_settings
    from prag_models.stages.promotion_evidence import read_evidence

    config, _ = graph
    target = promotion.mlflow_target(load_settings(config))
    retrain = dg.AssetSelection.assets("feedback_labels", "cfrag_retriever", "cfrag_retrievals", "generations",
                                       "lamp_evaluation", "lamp_retrieval_evaluation", "llm_utility",
                                       "cfrag_model_evaluation")  # fmt: skip
    assert materialize_graph(config, [TASK], selection=retrain).success
    bundle = {"user_encoder": 1, "retriever": 2, "reranker": 1, "reranker_no_eu": 1}
    assert _tags(target, "retriever", 2)["eval.bundle"] == promotion.bundle_key(bundle)  # evaluated by alias
    assert _tags(target, "retriever", 1)["eval.bundle"] == promotion.bundle_key(dict.fromkeys(bundle, 1))
    with duckdb.connect(str(load_settings(config).duckdb_path), read_only=True) as con:  # the champion retrieved too
        legs = read_evidence(con, TASK, promotion.bundle_key(bundle), promotion.bundle_key(dict.fromkeys(bundle, 1)))
        champion_rows = con.execute("SELECT count(*) FROM cfrag_retrievals WHERE method = 'cfrag@champion'").fetchone()
    dev = len(legs[0].challenger)
    assert legs[0].name == "retrieval" and dev >= 2 and champion_rows[0] > 0
    utility = [leg for leg in legs if leg.name == "llm utility"]  # the LLM's utility of each bundle's documents
    assert utility and len(utility[0].challenger) >= 2 and utility[0].metric == "utility"

    code, out, _ = _cli(monkeypatch, capsys, config, "promote", "--task", TASK, "--reason", "retrained retriever")
    # the gate on the paired interval of cfrag against cfrag@champion over every dev sample (retrieval leg)
    gated = "95 % CI" in out and "retrieval " in out and "n=" in out
    # fit.py: no epoch beat the initialisation on validation, or the significance gate kept the initialisation
    not_learned = "did not beat its untrained initialisation" in out
    assert code in (0, 1) and (gated or (code == 1 and not_learned)), out
    if code == 1:
        code, out, _ = _cli(monkeypatch, capsys, config, "promote", "--task", TASK, "--reason", "force", "--override")
        assert code == 0 and "override" in out
    assert _champions(target) == bundle
    sample = "Which tag does this movie relate to among the following tags? description: A heist that goes wrong"
    code, out, _ = _cli(monkeypatch, capsys, config, "answer", "--task", TASK, "--user", "u0001", "--input", sample)
    assert code == 0 and "prag-retriever-LaMP-2@champion (version 2)" in out
    assert "prag-retriever-LaMP-2/2" in _served_models(target, monkeypatch, sample)  # the promoted bundle is served
    code, out, _ = _cli(monkeypatch, capsys, config, "rollback", "--task", TASK, "--reason", "worse in production")
    if code == 1:  # v1 did not beat its initialisation (fit.py): restoring it takes an audited override (issue 26)
        assert "rollback refused" in out and "did not beat its untrained initialisation" in out, out
        assert _champions(target) == bundle
        code, out, _ = _cli(monkeypatch, capsys, config, "rollback", "--task", TASK, "--reason", "reviewed",
                            "--override")  # fmt: skip
        assert "by override" in out
    assert code == 0 and "rolled_back" in out and _champions(target) == dict.fromkeys(bundle, 1)
    assert "prag-retriever-LaMP-2/1" in _served_models(target, monkeypatch, sample)


def _served_models(target, monkeypatch, query: str) -> str:
    """The bundle the pyfunc model of the champion reranker runs with (its output's ``models``)."""
    import mlflow
    import pandas as pd

    monkeypatch.setenv("MLFLOW_TRACKING_URI", target.tracking_uri)
    model = mlflow.pyfunc.load_model(f"models:/{registry.registered_name('reranker', TASK)}@champion")
    out = model.predict(pd.DataFrame([{"task": TASK, "user_id": "u0001", "query": query}]))
    assert len(out["doc_ids"].iloc[0]) > 0 and "prag-reranker-LaMP-2/1" in out["models"].iloc[0]
    return str(out["models"].iloc[0])
