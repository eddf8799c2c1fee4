"""Champion/challenger promotion of the CFRAG bundle (real MLflow sqlite store) and the promotion jobs; the promotion
on a small materialized graph is tests/test_promotion_graph.py."""

import os

import pytest
import torch

from prag_models.methods.cfrag.retriever import PersonalizedRetriever  # noqa: E402
from prag_models.methods.cfrag.serialization import save_model  # noqa: E402
from prag_models.mlops import (
    promotion,
    registry,  # noqa: E402
)

TASK = "LaMP-2"


@pytest.fixture
def target(tmp_path) -> registry.MlflowTarget:
    """A sqlite tracking/registry store and a local artifact folder under tmp."""
    return registry.MlflowTarget(f"sqlite:///{tmp_path / 'mlflow.db'}", "test", str(tmp_path / "artifacts"))


@pytest.fixture
def model_dir(tmp_path):
    """One tiny saved model, registered under every kind's name (promotion never loads it)."""
    torch.manual_seed(0)
    return save_model(PersonalizedRetriever(user_dim=4, doc_dim=3), tmp_path / "saved")


def _register_bundle(target, folder, task: str = TASK) -> dict[str, int]:
    """A new version of every model of the task's bundle; returns kind -> version."""
    out = {}
    for kind in promotion.KINDS:
        entry = registry.log_and_register(target, folder, registry.registered_name(kind, task), {}, [1.0], "d1")
        out[kind] = entry.version
    return out


def _evaluated(target, folder, accuracy: float, task: str = TASK) -> dict[str, int]:
    versions = _register_bundle(target, folder, task)
    promotion.record_evaluation(target, task, versions, {"accuracy": accuracy, "f1_macro": accuracy / 2}, "dv1")
    return versions


def _champions(target, task: str = TASK) -> dict[str, int]:
    names = {k: registry.registered_name(k, task) for k in promotion.KINDS}
    return {k: registry.model_aliases(target, n).get("champion") for k, n in names.items()}


def _tags(target, kind: str, version: int, task: str = TASK) -> dict[str, str]:
    client = registry.make_client(target)
    return client.get_model_version(registry.registered_name(kind, task), str(version)).tags


def _legs(challenger, champion, name: str = "retrieval", metric: str = "ndcg@5", higher: bool = True, min_n: int = 2):
    """One leg of paired evidence (challenger and champion values on the same samples)."""
    return [promotion.PairedEvidence(name, metric, higher, challenger, champion, min_n)]


#: Per-sample values of a challenger better than its champion on every one of 12 samples, by 0.1 to 0.3.
BETTER = ([0.6, 0.7, 0.5, 0.8, 0.6, 0.9, 0.7, 0.6, 0.8, 0.5, 0.7, 0.6],
          [0.4, 0.5, 0.4, 0.5, 0.4, 0.6, 0.5, 0.3, 0.6, 0.4, 0.5, 0.4])  # fmt: skip


def test_decide_promotion_rules() -> None:
    """Issue 39.8: the gate decides on the paired 95 % interval with its n, never on two means."""
    better = promotion.decide_promotion(TASK, _legs(*BETTER))
    assert better.promote and "95 % CI" in better.message and "n=12" in better.message
    assert better.primary.difference.low > 0
    worse = promotion.decide_promotion(TASK, _legs(BETTER[1], BETTER[0]))
    assert not worse.promote and "worse" in worse.message and "champion kept" in worse.message
    tie = promotion.decide_promotion(TASK, _legs([0.5] * 6, [0.5] * 6))
    assert not tie.promote and "ties" in tie.message
    forced = promotion.decide_promotion(TASK, _legs(BETTER[1], BETTER[0]), override=True)
    assert forced.promote and "override" in forced.message and "worse" in forced.message
    missing = promotion.decide_promotion(TASK, [])
    assert not missing.promote and "no paired evidence" in missing.message
    # MAE (LaMP-3): lower is better, so the challenger's interval must lie below 0
    assert promotion.decide_promotion("LaMP-3", _legs(BETTER[1], BETTER[0], "llm", "mae", False)).promote
    assert not promotion.decide_promotion("LaMP-3", _legs(*BETTER, "llm", "mae", False)).promote


def test_the_gate_keeps_a_higher_mean_whose_interval_straddles_zero() -> None:
    """Issue 39.8 (failed first: the gate promoted on the strictly higher mean, 0.75 > 0.5 on 4 samples): a mean
    gain the interval does not show keeps the champion, with both means, the interval and n in the reason."""
    kept = promotion.decide_promotion(TASK, _legs([1, 1, 0, 1], [0, 1, 1, 0], "llm", "accuracy", min_n=2))
    assert not kept.promote and "does not lie above 0" in kept.message
    assert "challenger 0.75 vs champion 0.5" in kept.message and "n=4" in kept.message
    leg = kept.primary
    assert leg.difference.low < 0 < leg.difference.high and leg.difference.n == 4


def test_a_short_llm_leg_reports_but_does_not_decide_and_a_shown_regression_blocks() -> None:
    """The retrieval leg (every dev sample) decides; the LLM leg counts from its minimum n on: below it the message
    says so, from it on a shown regression keeps the champion."""
    retrieval = _legs(*BETTER)
    short = promotion.decide_promotion(TASK, retrieval + _legs([0, 0, 0, 0], [1, 1, 1, 1], "llm", "accuracy", min_n=30))
    assert short.promote and "n=4 (fewer than its minimum n=30: not used)" in short.message
    llm = _legs([0.0] * 12, [1.0] * 12, "llm", "accuracy", min_n=10)
    blocked = promotion.decide_promotion(TASK, retrieval + llm)
    assert not blocked.promote and "worse on llm accuracy" in blocked.message
    only_short = promotion.decide_promotion(TASK, _legs([1, 1], [0, 0], "llm", "accuracy", min_n=30))
    assert not only_short.promote and "no paired evidence with its minimum n" in only_short.message


def test_record_evaluation_tags_and_run_metrics(target, model_dir) -> None:
    versions = _evaluated(target, model_dir, 0.5)
    tags = _tags(target, "retriever", versions["retriever"])
    assert tags["eval.bundle.accuracy"] == "0.5" and tags["eval.data_version"] == "dv1"
    assert tags["eval.bundle"] == promotion.bundle_key(versions)
    assert "eval.accuracy" not in tags and "whole CFRAG bundle" in tags["eval.bundle.note"]  # the bundle's, said so
    run_id = registry.get_version(target, registry.registered_name("reranker", TASK), versions["reranker"]).run_id
    assert registry.run_metric_history(target, run_id, "eval.bundle.f1_macro") == [0.25]
    promotion.record_evaluation(target, TASK, versions, {"accuracy": 2 / 3}, "dv1")
    assert _tags(target, "retriever", versions["retriever"])["eval.bundle.accuracy"] == "0.6667"  # rounded


def test_refuses_worse_and_tie_accepts_better(target, model_dir) -> None:
    first = _evaluated(target, model_dir, 0.5)
    _evaluated(target, model_dir, 0.25)
    refused = promotion.promote(target, TASK, "alice", "weekly retrain", evidence=_legs(BETTER[1], BETTER[0]))
    assert refused.action == "refused" and not refused.promoted
    assert "worse" in refused.message and "95 % CI" in refused.message and refused.n_samples == 12
    assert _champions(target) == first
    assert _tags(target, "retriever", 2)["promotion.action"] == "refused"
    kept = _version(target, "retriever", 1)  # the champion kept says why, with its evidence
    assert "kept as champion" in kept.description and "95 % CI" in kept.description and "n=12" in kept.description

    _evaluated(target, model_dir, 0.5)  # version 3 ties the champion
    tie = promotion.promote(target, TASK, "alice", "tie", evidence=_legs([0.5] * 5, [0.5] * 5))
    assert not tie.promoted and "ties" in tie.message
    assert _champions(target) == first

    best = _evaluated(target, model_dir, 0.75)
    seen = []
    done = promotion.promote(target, TASK, "bob", "better ndcg", evidence=lambda *keys: seen.append(keys) or
                             _legs(*BETTER))  # fmt: skip
    assert seen == [(promotion.bundle_key(best), promotion.bundle_key(first))]  # read for exactly these bundles
    assert done.promoted and done.action == "promoted"
    assert done.metric == "retrieval ndcg@5" and done.n_samples == 12 and done.ci_low > 0
    assert (done.challenger_value, done.champion_value) == pytest.approx((0.6667, 0.4583), abs=1e-4)
    assert _champions(target) == best and done.from_versions == first
    tags = _tags(target, "user_encoder", best["user_encoder"])
    assert tags["promotion.action"] == "promoted" and tags["promotion.actor"] == "bob"
    assert tags["promotion.reason"] == "better ndcg" and tags["promotion.metric"] == "retrieval ndcg@5"
    assert tags["promotion.n_samples"] == "12" and float(tags["promotion.ci_low"]) > 0
    assert tags["promotion.evidence"] == "retrieval ndcg@5" and "95 % CI" in tags["promotion.evidence.retrieval"]
    assert tags["promotion.override"] == "false" and tags["promotion.decided_at"].endswith("Z")
    described = _version(target, "reranker", best["reranker"]).description
    assert "promoted to champion" in described and "n=12 paired samples" in described
    assert described.count("**Promotion gate**") == 1  # the refusal's paragraph was replaced, not appended
    rows = done.rows()
    assert len(rows) == 4 and set(rows["from_version"]) == {1} and set(rows["to_version"]) == {4}
    assert set(rows["n_samples"]) == {12}


def _version(target, kind: str, version: int, task: str = TASK):
    return registry.make_client(target).get_model_version(registry.registered_name(kind, task), str(version))


def test_refuses_a_challenger_that_did_not_beat_its_initialisation(target, model_dir) -> None:
    """Better on the metric, but training left the reranker worse than untrained on validation: not promoted."""
    _evaluated(target, model_dir, 0.5)
    promotion.promote(target, TASK, "alice", "first")
    best = _evaluated(target, model_dir, 0.9)
    client = registry.make_client(target)
    name = registry.registered_name("reranker", TASK)
    tags = {"training.improved": "false", "training.val_kl_init": "0.7", "training.val_kl_best": "0.7"}
    for key, value in tags.items():
        client.set_model_version_tag(name, str(best["reranker"]), key, value)
    refused = promotion.promote(target, TASK, "alice", "weekly retrain", evidence=_legs(*BETTER))
    assert not refused.promoted and "did not beat its untrained initialisation" in refused.message
    assert f"{name} v{best['reranker']}" in refused.message and "0.7" in refused.message
    assert refused.n_samples == 12 and "95 % CI" in refused.message  # refused by another rule: its evidence recorded
    assert promotion.promote(target, TASK, "alice", "reviewed", override=True, evidence=_legs(*BETTER)).promoted


def test_override_promotes_worse_and_rollback_restores(target, model_dir) -> None:
    first = _evaluated(target, model_dir, 0.5)
    second = _evaluated(target, model_dir, 0.25)
    forced = promotion.promote(target, TASK, "carol", "hotfix", override=True, evidence=_legs(BETTER[1], BETTER[0]))
    assert forced.promoted and forced.override and "override" in forced.message and forced.n_samples == 12
    assert _champions(target) == second
    assert _tags(target, "reranker", 2)["promotion.override"] == "true"

    back = promotion.rollback(target, TASK, "carol", "hotfix was bad")
    assert back.action == "rolled_back" and back.to_versions == first and back.from_versions == second
    assert _champions(target) == first
    restored = _version(target, "reranker", first["reranker"]).description  # keeps the evidence it was judged on
    assert "**Promotion gate**" in restored and "replaced as champion" in restored and "95 % CI" in restored
    assert restored.index("**Promotion gate**") < restored.index("**Rollback**")  # the rollback follows the gate
    assert _tags(target, "reranker", 2)["promotion.action"] == "rolled_back"
    with pytest.raises(LookupError, match="nothing to roll back to"):
        promotion.rollback(target, TASK, "carol", "again")


def test_rollback_without_history_and_missing_models(target, model_dir) -> None:
    _evaluated(target, model_dir, 0.5)
    with pytest.raises(LookupError, match="no previous champion recorded"):
        promotion.rollback(target, TASK, "dave", "nothing promoted yet")
    same = promotion.promote(target, TASK, "dave", "first version")
    assert not same.promoted and "already champion" in same.message
    with pytest.raises(LookupError, match="does not exist: train the CFRAG models of LaMP-3"):
        promotion.promote(target, "LaMP-3", "dave", "no models")


def test_without_paired_evidence_the_champion_is_kept(target, model_dir) -> None:
    """A recorded metric alone (no per-sample values of both bundles on the same samples) decides nothing."""
    first = _register_bundle(target, model_dir)  # version 1, never evaluated
    _evaluated(target, model_dir, 0.9)
    kept = promotion.promote(target, TASK, "erin", "first evaluated bundle")
    assert not kept.promoted and "no paired evidence" in kept.message and kept.n_samples is None
    assert _champions(target) == first


def test_append_decision_writes_model_promotions(target, model_dir, tmp_path) -> None:
    import duckdb

    _evaluated(target, model_dir, 0.5)
    _evaluated(target, model_dir, 0.6)
    decision = promotion.promote(target, TASK, "frank", "better", evidence=_legs(*BETTER))
    with duckdb.connect(str(tmp_path / "p.duckdb")) as con:
        assert promotion.append_decision(con, decision) == 4
        rows = con.execute(f"SELECT * FROM {promotion.PROMOTIONS_TABLE} ORDER BY registered_name").df()
    assert list(rows.columns) == [
        "task", "action", "registered_name", "from_version", "to_version", "metric", "challenger_value",
        "champion_value", "override", "actor", "reason", "decided_at", "message", "difference", "ci_low", "ci_high",
        "n_samples",
    ]  # fmt: skip
    assert set(rows["action"]) == {"promoted"} and set(rows["to_version"]) == {2} and not rows["override"].any()
    assert rows["registered_name"].tolist()[0] == "prag-reranker-LaMP-2"
    assert os.path.exists(tmp_path / "p.duckdb")


# ---------------------------------------------------------------- Dagster jobs (MLflow store of a tiny config)


def _job_result(job, config, op: str, **values):
    from prag_assets.resources.resource_set import default_resources

    run_config = {"ops": {op: {"config": values}}}
    return job.execute_in_process(
        run_config=run_config, resources=default_resources(config_file=str(config)), raise_on_error=False
    )


def test_promotion_jobs_record_and_fail_on_refusal(tiny_config, model_dir, monkeypatch) -> None:
    import duckdb

    from prag_assets.automation.promotion_jobs import promote_cfrag_models, rollback_cfrag_models
    from prag_models.config.settings import load_settings

    settings = load_settings(tiny_config)
    target = promotion.mlflow_target(settings)
    first = _evaluated(target, model_dir, 0.5)
    _evaluated(target, model_dir, 0.25)
    values = {"task": "lamp2", "actor": "gina", "reason": "nightly"}
    refused = _job_result(promote_cfrag_models, tiny_config, "promote_cfrag_bundle", **values)
    assert not refused.success
    failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
    error = str(failure.event_specific_data.error)
    assert "promotion refused" in error and "no paired evidence" in error  # none recorded in its DuckDB file
    forced = _job_result(promote_cfrag_models, tiny_config, "promote_cfrag_bundle", **values, override=True)
    assert forced.success and _champions(target)["retriever"] == 2
    monkeypatch.setenv("USER", "hank")  # an empty actor falls back to $USER
    back = _job_result(rollback_cfrag_models, tiny_config, "rollback_cfrag_bundle", **{**values, "actor": ""})
    assert back.success and _champions(target) == first
    again = _job_result(rollback_cfrag_models, tiny_config, "rollback_cfrag_bundle", **values)
    assert not again.success
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        rows = con.execute("SELECT action, override, actor, to_version FROM model_promotions").df()
    assert rows["action"].value_counts().to_dict() == {"refused": 4, "promoted": 4, "rolled_back": 4}
    assert set(rows[rows["action"] != "rolled_back"]["actor"]) == {"gina"}
    assert set(rows[rows["action"] == "rolled_back"]["actor"]) == {"hank"}
    assert rows[rows["action"] == "promoted"]["override"].all()
    assert set(rows[rows["action"] == "rolled_back"]["to_version"]) == {1}


# ---------------------------------------------------------------- the graph: evaluation by alias, `prag answer`

# validation_share 0: the training gate judges on the training labels, so this test exercises the metric gate
