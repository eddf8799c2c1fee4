"""Whole figures or none (issue 47): where the main job's budget cannot pay data.llm_eval_samples a task, the
generated outputs and P-PRF on LaMP are deferred (run.generation_samples = 0) — the graph still ends with every check
passed and no figure of one sample — and the LLM evidence run generates them whole when its budget pays them."""

import json

import dagster as dg
import duckdb
import pytest
from conftest import check_results, materialize_graph, partition_metadata, write_config

from prag_models.config.settings import load_settings

TASKS = ["LaMP-2", "LaMP-5"]  # one label-scored task, one generated
pytestmark = pytest.mark.models  # materializes the graph with the real embedder (the fast tier leaves it out)


def test_a_deferred_llm_evaluation_leaves_no_figure_and_the_evidence_run_generates_it_whole(tmp_path):
    from prag_assets.cli.budget import budget_cuts, evidence_settings
    from prag_models.evaluation.llm_budget import Throughput, budget_path, machine_key

    config = write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                          data={"tasks": TASKS, "llm_eval_samples": 3}, run={"generation_samples": 0})  # fmt: skip
    result = materialize_graph(config, TASKS)
    failed = {name for name, (passed, severity) in check_results(result).items() if not passed and severity == "ERROR"}
    assert result.success and not failed, failed
    gate = partition_metadata(result, "cfrag_model_evaluation")
    assert all("promotion_evidence" in str(gate[t]) for t in TASKS), gate  # the gate's evidence is still recorded
    settings = load_settings(config)
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM generations").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM pbr_lamp_retrievals WHERE method = 'pbr'").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM pbr_lamp_retrievals").fetchone()[0] > 0  # pbr_anchor_only stays
        generated = con.execute("SELECT count(*) FROM lamp_evaluation WHERE n_samples > 0").fetchone()[0]
        assert generated == 0  # no figure of the generated outputs
        (line,) = budget_cuts(con, settings, "not_measured", "feedback_probe")
    assert "generated outputs" in line and "prag evidence" in line

    # the evidence run: its budget pays the generations whole (or not: they stay deferred, and it says so)
    slow = Throughput(scored_s=1.0, generated_s=1.0, prompt_tokens_per_s=100.0, measured_in_s=1.0, utility_s=1.0)
    path = budget_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"throughput": slow.__dict__, "machine_key": machine_key(settings)}), "utf-8")
    base = load_settings(config, environ={"PRAG__RUN__GENERATION_SAMPLES": "-1"})
    small = base.model_copy(update={"run": base.run.model_copy(update={"evidence_budget_s": 5.0})})
    kept, said = evidence_settings(small)
    assert kept.run.generation_samples == 0 and "stay deferred" in said
    ample = base.model_copy(update={"run": base.run.model_copy(update={"evidence_budget_s": 100000.0})})
    sized, said = evidence_settings(ample)
    assert sized.run.generation_samples == -1 and sized.run.evidence_budget_s < 100000.0 and "3 samples" in said

    from prag_assets.automation.demo_job import EVIDENCE_JOB
    from prag_assets.definitions import defs

    job = defs.get_job_def(EVIDENCE_JOB)
    selection = dg.AssetSelection.assets(*job.asset_layer.selected_asset_keys)
    evidence_config = write_config(tmp_path / "evidence.toml", tmp_path / "home", generator_backend="fake",
                                   data={"tasks": TASKS, "llm_eval_samples": 3})  # fmt: skip
    again = materialize_graph(evidence_config, TASKS, selection=selection)
    assert again.success
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        per_task = dict(con.execute("SELECT task, count(DISTINCT sample_id) FROM generations GROUP BY task").fetchall())
        assert per_task == {t: 3 for t in TASKS}
        assert con.execute("SELECT count(*) FROM pbr_lamp_retrievals WHERE method = 'pbr'").fetchone()[0] > 0
