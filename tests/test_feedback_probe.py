"""Measure before spending (issue 28): the CFRAG feedback stage labels a probe first and spends the rest of the budget
only where the teacher's ranking beats cosine on the truth; otherwise it stops, says why, and the retriever and
rerankers register their initialisation (tagged why) instead of being trained towards a teacher with no headroom."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pytest
from conftest import materialize_graph, write_config

from prag_models.config.settings import load_settings
from prag_models.llm.fake import FakeGenerator

TASK = "LaMP-2"
PROBE = 8
#: the budget: all 12 of the tiny demo's train samples (6 users x 1 doc each); the probe: 8 of them whose candidates
#: differ in truth
CFRAG = {"epochs": 2, "reranker_layers": 1, "reranker_max_length": 32, "max_feedback_samples": 12,
         "feedback_probe_samples": PROBE, "train_epochs": 2}  # fmt: skip


class KnownTeacher(FakeGenerator):
    """A teacher of known quality: the gold log-likelihood of a feedback prompt is the truth of its one document
    (1 relevant, 0 not) times ``signal`` plus seeded Gaussian noise of sd ``noise`` (pure noise at signal 0)."""

    def __init__(self, gains: dict[str, float], signal: float, noise: float, name: str) -> None:
        super().__init__()
        self.gains, self.signal, self.noise, self.model_id = gains, signal, noise, f"teacher:{name}"

    def score_choices(self, prompts, choices):  # noqa: ANN001, ANN201 - the Generator interface
        """relevance x signal + noise for each prompt (one choice: the gold)."""
        out = []
        for p in prompts:
            seed = int(hashlib.sha256(f"{self.model_id}{p}".encode()).hexdigest()[:8], 16)
            noise = float(np.random.default_rng(seed).normal()) * self.noise
            out.append([self.gains[p] * self.signal + noise - 10.0 for _ in choices])
        return out


def _gains(con, settings) -> dict[str, float]:
    """The truth (0/1) of every (sample, candidate) feedback prompt of the task's feedback budget."""
    from prag_models.data.truth import load_truth
    from prag_models.methods.cfrag.feedback import feedback_prompts, load_feedback_inputs

    inputs = load_feedback_inputs(con, TASK, settings)
    pairs = [(s, c) for s in inputs.samples.itertuples(index=False) for c in inputs.candidates[s.sample_id]]
    prompts, _ = feedback_prompts(TASK, inputs, pairs, FakeGenerator(), settings)
    truth = load_truth(con, TASK, "train")
    return {p: truth.gain(s.sample_id, c.doc_id) or 0.0 for p, (s, c) in zip(prompts, pairs, strict=True)}


def _labelled(con, generator_id: str) -> int:
    """Samples with labels of this generator."""
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'feedback_labels'").fetchone()[0]:
        return 0
    sql = "SELECT count(DISTINCT sample_id) FROM feedback_labels WHERE task = ? AND generator_id = ?"
    return con.execute(sql, [TASK, generator_id]).fetchall()[0][0]


@pytest.fixture(scope="module")
def probe_base(tmp_path_factory) -> Path:
    """The tiny demo up to the CFRAG similar users, built once for the module (each test writes to its own copy)."""
    root = tmp_path_factory.mktemp("probe_base")
    config = write_config(root / "prag.toml", root / "home", generator_backend="fake",
                          data={"tasks": [TASK]}, cfrag=CFRAG)  # fmt: skip
    upto = dg.AssetSelection.assets("cfrag_similar_users", "user_embeddings").upstream()
    assert materialize_graph(config, [TASK], selection=upto).success
    return root


@pytest.fixture
def probe_home(probe_base, tmp_path):
    """A private copy of the module's demo, and the truth of every feedback prompt."""
    root = tmp_path / "probe"
    shutil.copytree(probe_base, root)
    config = root / "prag.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(str(probe_base), str(root)), encoding="utf-8")
    settings = load_settings(config)
    with duckdb.connect(str(settings.duckdb_path)) as con:
        gains = _gains(con, settings)
    return config, settings, gains


def test_probe_stops_without_headroom_and_spends_the_budget_with_it(probe_home) -> None:
    """No headroom (a pure-noise teacher): the probe's 8 samples only, decision and reason recorded; forced: all 12;
    a teacher that knows the truth (relevance + small noise): all 12."""
    from prag_models.methods.cfrag.feedback import label_task

    config, settings, gains = probe_home
    noise = KnownTeacher(gains, signal=0.0, noise=1.0, name="noise")
    good = KnownTeacher(gains, signal=3.0, noise=0.3, name="good")
    forced = settings.model_copy(update={"cfrag": settings.cfrag.model_copy(update={"feedback_force": True})})
    with duckdb.connect(str(settings.duckdb_path)) as con:
        stopped = label_task(con, TASK, settings, noise)
        assert stopped["probe"]["decision"] == "stopped", stopped["probe"]
        assert not stopped["probe"]["headroom_low"] > 0 and "no teacher headroom" in stopped["probe"]["reason"]
        assert _labelled(con, noise.model_id) == stopped["samples"] == PROBE and stopped["budget_samples"] == 12
        assert stopped["labelled_now"] == PROBE * stopped["candidates_per_sample"]
        row = con.execute("SELECT decision, probe_samples FROM feedback_probe WHERE task = ?", [TASK]).fetchall()
        assert row == [("stopped", PROBE)]

        spent = label_task(con, TASK, forced, noise)
        assert spent["probe"]["decision"] == "forced" and _labelled(con, noise.model_id) == 12
        assert spent["reused"] == stopped["labels"]  # the probe's labels are not generated twice

        known = label_task(con, TASK, settings, good)
        probe = known["probe"]
        assert probe["decision"] == "continued" and probe["headroom_low"] > 0, str(probe)
        assert probe["teacher_truth_ndcg"] > probe["cosine_truth_ndcg"]
        assert _labelled(con, good.model_id) == known["samples"] == 12


def test_no_headroom_registers_the_initialisation_tagged_why(probe_home, monkeypatch) -> None:
    """In the graph: feedback_labels stops after the probe (metadata says why), the retriever and both rerankers
    register their untrained initialisation with MLflow tag training.skipped, and their blocking checks pass."""
    from prag_assets.resources import models as resources
    config, settings, gains = probe_home
    noise = KnownTeacher(gains, signal=0.0, noise=1.0, name="noise")
    monkeypatch.setattr(resources, "_generator", lambda _settings: noise)
    selection = dg.AssetSelection.assets("feedback_labels", "cfrag_retriever", "cfrag_reranker")
    result = materialize_graph(config, [TASK], selection=selection)
    assert result.success
    checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert checks and all(c.passed for c in checks)
    probe = [m.metadata["probe"].value for m in result.asset_materializations_for_node("feedback_labels")][-1]
    assert probe.startswith("stopped: no teacher headroom")
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        models = con.execute("SELECT kind, steps, registered_name, version FROM cfrag_models WHERE kind != "
                             "'user_encoder' ORDER BY kind").fetchall()  # fmt: skip
    assert [(k, s) for k, s, _, _ in models] == [("reranker", 0), ("reranker_no_eu", 0), ("retriever", 0)]
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=settings.mlflow_uri, registry_uri=settings.mlflow_uri)
    for _, _, name, version in models:
        tags = client.get_model_version(name, str(version)).tags
        assert tags["training.skipped"].startswith("no teacher headroom"), tags


def test_the_probe_decides_on_fresh_samples_as_many_as_the_pilot_says_it_needs(probe_home) -> None:
    """A pilot of 3 plans the second stage for 80 % power at its headroom (at least feedback_probe_min_samples, at
    most the budget's other informative samples) and the headroom is decided on those fresh samples alone."""
    from prag_models.methods.cfrag import feedback_probe as fp
    from prag_models.methods.cfrag.feedback import label_task, load_feedback_inputs

    config, settings, gains = probe_home
    small = settings.model_copy(update={"cfrag": settings.cfrag.model_copy(
        update={"feedback_probe_samples": 3, "feedback_probe_min_samples": 2})})  # fmt: skip
    with duckdb.connect(str(settings.duckdb_path)) as con:
        inputs = load_feedback_inputs(con, TASK, small)
        truth = fp.candidate_gains(con, TASK, inputs)
        ids = inputs.samples["sample_id"].tolist()
        pilot = fp.probe_sample_ids(ids, truth, small)
        rest = [s for s in fp.informative_ids(ids, truth) if s not in pilot]
        strong, weak = np.array([0.9, 1.0, 1.1]), np.array([-0.4, 0.1, 0.6])
        planned = len(fp.second_stage_ids(ids, truth, pilot, strong, small)[0])
        assert 2 <= planned <= 3 < len(rest)  # a t-test needs about 3 even at a huge effect
        weak_stage, needed = fp.second_stage_ids(ids, truth, pilot, weak, small)
        assert len(weak_stage) == needed == len(rest)  # a weak effect needs them all
        assert not set(weak_stage) & set(pilot)
        # a time budget that pays fewer than the power needs labels none of them (nothing decided on too few)
        assert fp.second_stage_ids(ids, truth, pilot, weak, small, affordable=len(rest) - 1) == ([], len(rest))
        good = KnownTeacher(gains, signal=3.0, noise=0.3, name="good-two-stage")
        known = label_task(con, TASK, small, good)
    probe = known["probe"]
    assert probe["pilot_samples"] == 3 and probe["decided_on"] == probe["headroom_n"] >= 2
    assert probe["probe_samples"] == 3 + probe["decided_on"] and probe["decision"] == "continued"


def _with_speeds(settings, seconds_per_prompt: float, feedback_budget_s: float):
    """The settings with a feedback budget, and this machine's LLM speeds stored as `prag materialize` stores them."""
    import json

    from prag_models.evaluation.llm_budget import Throughput, budget_path, machine_key

    speeds = Throughput(scored_s=seconds_per_prompt, generated_s=seconds_per_prompt, prompt_tokens_per_s=100.0,
                        measured_in_s=1.0, utility_s=seconds_per_prompt)  # fmt: skip
    path = budget_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"throughput": speeds.__dict__, "machine_key": machine_key(settings)}), "utf-8")
    return settings.model_copy(update={"run": settings.run.model_copy(update={"feedback_budget_s": feedback_budget_s})})


def test_a_probe_the_budget_cannot_pay_spends_nothing_and_says_what_it_needs(probe_home) -> None:
    """Issue 47: on a slow machine the probe spent minutes to decide on 3-8 samples. With a share of
    run.feedback_budget_s that cannot pay the pilot and the smallest second stage, nothing is labelled and the
    probe records "not measured on this machine: needs N samples, the budget buys M"; training then registers the
    initialisation. With a share that pays, the probe runs and decides as before."""
    from prag_models.methods.cfrag.feedback import label_task
    from prag_models.methods.cfrag.feedback_probe import probe_stop_reason

    config, settings, gains = probe_home
    good = KnownTeacher(gains, signal=3.0, noise=0.3, name="good-budget")
    poor = _with_speeds(settings, seconds_per_prompt=3.0, feedback_budget_s=60.0)  # 20 prompts: < 1 pilot
    with duckdb.connect(str(settings.duckdb_path)) as con:
        skipped = label_task(con, TASK, poor, good)
        probe = skipped["probe"]
        assert probe["decision"] == "not_measured" and skipped["labelled_now"] == 0, probe
        needs = PROBE + poor.cfrag.feedback_probe_min_samples
        buys = int(20 // skipped["candidates_per_sample"])
        assert f"needs {needs} samples" in probe["reason"] and f"the budget buys {buys}" in probe["reason"], probe
        assert _labelled(con, good.model_id) == 0
        assert probe_stop_reason(con, TASK).startswith("not measured on this machine")

        rich = _with_speeds(settings, seconds_per_prompt=0.01, feedback_budget_s=60.0)
        paid = label_task(con, TASK, rich, good)
        assert paid["probe"]["decision"] == "continued" and paid["labelled_now"] > 0, paid["probe"]
        assert probe_stop_reason(con, TASK) == ""


def test_in_the_graph_an_unpaid_probe_passes_its_checks_and_registers_the_initialisation(probe_home,
                                                                                         monkeypatch) -> None:
    """feedback_labels with a probe the budget cannot pay: no labels, its blocking check passes (it required a
    label), and the retriever and rerankers register their initialisation tagged "not measured on this machine"."""
    from prag_assets.resources import models as resources

    config, settings, gains = probe_home
    monkeypatch.setenv("PRAG__RUN__FEEDBACK_BUDGET_S", "1")
    _with_speeds(settings, seconds_per_prompt=3.0, feedback_budget_s=1.0)
    teacher = KnownTeacher(gains, signal=3.0, noise=0.3, name="good-unpaid")
    monkeypatch.setattr(resources, "_generator", lambda _settings: teacher)
    selection = dg.AssetSelection.assets("feedback_labels", "cfrag_retriever", "cfrag_reranker")
    result = materialize_graph(config, [TASK], selection=selection)
    checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert result.success and checks and all(c.passed for c in checks)
    probe = [m.metadata["probe"].value for m in result.asset_materializations_for_node("feedback_labels")][-1]
    assert probe.startswith("not_measured: not measured on this machine"), probe
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        sql = "SELECT kind, steps FROM cfrag_models WHERE kind != 'user_encoder' ORDER BY kind"
        steps = con.execute(sql).fetchall()
        assert _labelled(con, teacher.model_id) == 0
    assert steps == [("reranker", 0), ("reranker_no_eu", 0), ("retriever", 0)]
