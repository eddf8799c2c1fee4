"""The promotion gate shared by rollback and promotion (issue 26): flagged or unlearned versions need an audited
override, and the aliases follow the gate (real MLflow sqlite store)."""

# ruff: noqa: F811 - the fixtures target and model_dir come from test_promotion
from test_promotion import (  # noqa: F401
    BETTER,
    TASK,
    _champions,
    _evaluated,
    _legs,
    _register_bundle,
    _tags,
    model_dir,
    target,
)

from prag_models.mlops import promotion, registry


def test_rollback_shares_the_gate_flagged_and_unlearned_versions_need_an_audited_override(target, model_dir,
                                                                                          tmp_path) -> None:
    """Issue 26: rollback never restores a version flagged for retraining after an erasure (or one whose training did
    not beat its initialisation) unless overridden; the override names who and why on the versions and in
    model_promotions."""
    import duckdb

    from prag_models.privacy.forget import RETRAIN_TAG

    first = _evaluated(target, model_dir, 0.5)
    promotion.promote(target, TASK, "alice", "first")
    second = _evaluated(target, model_dir, 0.75)
    assert promotion.promote(target, TASK, "alice", "better", evidence=_legs(*BETTER)).promoted
    client = registry.make_client(target)
    for kind, version in first.items():  # what `prag forget` does to the versions trained before an erasure
        client.set_model_version_tag(registry.registered_name(kind, TASK), str(version), RETRAIN_TAG, "true")
    refused = promotion.rollback(target, TASK, "bob", "second looks off")
    assert refused.action == "refused" and not refused.promoted and "erased user" in refused.message
    assert _champions(target) == second
    forced = promotion.rollback(target, TASK, "bob", "legal approved the old model", override=True)
    assert forced.action == "rolled_back" and forced.override and _champions(target) == first
    tags = _tags(target, "reranker", first["reranker"])
    assert tags["promotion.override"] == "true" and tags["promotion.actor"] == "bob"
    assert tags["promotion.reason"] == "legal approved the old model" and "override" in tags["promotion.message"]
    with duckdb.connect(str(tmp_path / "p.duckdb")) as con:
        promotion.append_decision(con, forced)
        rows = con.execute("SELECT DISTINCT action, override, actor, reason FROM model_promotions").fetchall()
    assert rows == [("rolled_back", True, "bob", "legal approved the old model")]


def test_rollback_refuses_a_version_that_did_not_beat_its_initialisation(target, model_dir) -> None:
    first = _evaluated(target, model_dir, 0.5)
    promotion.promote(target, TASK, "alice", "first")
    _evaluated(target, model_dir, 0.75)
    promotion.promote(target, TASK, "alice", "better", evidence=_legs(*BETTER))
    name = registry.registered_name("retriever", TASK)
    registry.make_client(target).set_model_version_tag(name, str(first["retriever"]), "training.improved", "false")
    refused = promotion.rollback(target, TASK, "bob", "back")
    assert refused.action == "refused" and "did not beat its untrained initialisation" in refused.message
    assert f"{name} v{first['retriever']}" in refused.message


def test_aliases_follow_the_gate_and_the_registry_says_what_the_champion_is(target, model_dir) -> None:
    """Issue 29 point 5: a first version whose training did not beat its initialisation is champion only as the
    untrained initialisation, and the registered model says so; a promoted version's status names the gate."""
    client = registry.make_client(target)
    first = {}
    for kind in promotion.KINDS:
        name = registry.registered_name(kind, TASK)
        first[kind] = registry.log_and_register(target, model_dir, name, {}, [1.0], "d1",
                                                tags={"training.improved": "false"}).version  # fmt: skip
        status = client.get_registered_model(name).tags[registry.CHAMPION_STATUS_TAG]
        assert status.startswith("v1: the untrained initialisation")
    promotion.record_evaluation(target, TASK, first, {"accuracy": 0.5}, "dv1")
    _evaluated(target, model_dir, 0.75)
    assert promotion.promote(target, TASK, "alice", "trained and better", evidence=_legs(*BETTER)).promoted
    status = client.get_registered_model(registry.registered_name("reranker", TASK)).tags[registry.CHAMPION_STATUS_TAG]
    assert status == "v2: promoted, passed the gate"


def _bundle(target, folder, untrained: tuple[str, ...] = ()) -> dict[str, int]:
    """A new version of every kind, registered as the training assets do (task and kind tags); the kinds in
    ``untrained`` at their initialisation (tag training.skipped: the feedback probe stopped)."""
    versions = {}
    for kind in promotion.KINDS:
        tags = {"task": TASK, "kind": kind} | ({"training.skipped": "no teacher headroom"} if kind in untrained else {})
        entry = registry.log_and_register(target, folder, registry.registered_name(kind, TASK), {}, [1.0], "d1",
                                          tags=tags)  # fmt: skip
        versions[kind] = entry.version
    return versions


def test_the_registry_list_says_whether_each_champion_is_trained(target, model_dir) -> None:
    """Issue 50: the registered model's first tag ``champion`` (MLflow's registered-models list shows the first tags,
    the first unclipped at 1,280 px) and the champion version's training.state say whether the champion is trained or
    the untrained initialisation, with its version, and follow the alias: first version, promotion, rollback."""
    client = registry.make_client(target)
    untrained = ("retriever", "reranker", "reranker_no_eu")  # what the feedback probe's stop leaves untrained

    def said(kind: str) -> tuple[str, str, str]:
        name = registry.registered_name(kind, TASK)
        tags = client.get_registered_model(name).tags
        listed = [key for key in tags if not key.startswith("mlflow.")][:3]  # the list page's tag cell
        assert listed == ["champion", "task", "kind"], listed
        champion = client.get_model_version_by_alias(name, registry.CHAMPION)
        return tags["champion"], champion.tags["training.state"], tags[registry.CHAMPION_STATUS_TAG]

    first = _bundle(target, model_dir, untrained)  # the first version: champion as such, untrained
    training, state, status = said("reranker")
    assert (training, state) == (f"v{first['reranker']} untrained", "untrained initialisation")
    assert status.startswith("v1: the untrained initialisation (the feedback probe stopped")
    assert said("user_encoder")[:2] == ("v1 trained", "trained")
    promotion.record_evaluation(target, TASK, first, {"accuracy": 0.5}, "dv1")

    second = _bundle(target, model_dir)  # trained: promoted, the tags change with the alias
    promotion.record_evaluation(target, TASK, second, {"accuracy": 0.75}, "dv1")
    assert promotion.promote(target, TASK, "alice", "trained", evidence=_legs(*BETTER)).promoted
    assert said("reranker") == ("v2 trained", "trained", "v2: promoted, passed the gate")

    third = _bundle(target, model_dir, untrained)  # a better encoder beside untrained rerankers: promoted, said so
    promotion.record_evaluation(target, TASK, third, {"accuracy": 0.9}, "dv1")
    assert promotion.promote(target, TASK, "alice", "better encoder", evidence=_legs(*BETTER)).promoted
    assert said("reranker")[:2] == ("v3 untrained", "untrained initialisation")
    assert said("user_encoder")[:2] == ("v3 trained", "trained")

    assert promotion.rollback(target, TASK, "bob", "back").action == promotion.ROLLED_BACK
    assert said("reranker") == ("v2 trained", "trained", "v2: rolled back, the gate passed")
