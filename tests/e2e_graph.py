"""The whole LaMP asset graph with the real packaged models on a tiny demo, for a contiguous range of tasks: shared by
tests/test_graph_e2e.py (LaMP-1..3) and tests/test_graph_e2e_generation.py (LaMP-4..7), two files so that the two
halves run on both xdist workers at once (`--dist loadfile` keeps a file on one worker)."""

from pathlib import Path

import dagster as dg
import duckdb
from conftest import materialize_graph, partition_metadata, write_config

from prag_models.config.settings import load_settings

METHODS = set(load_settings(environ={}).retrieval.methods)


def _check_results(result) -> dict[str, tuple[bool, str]]:
    """check name -> (passed, severity) of every check evaluation of a run."""
    out = {}
    for e in result.all_events:
        if e.event_type_value == "ASSET_CHECK_EVALUATION":
            data = e.event_specific_data
            name = f"{data.asset_check_key.asset_key.to_user_string()}:{data.check_name}"
            out[name] = (data.passed, data.severity.value)
    return out


def run_whole_graph(tmp_path: Path, tasks: list[str], answer_modes: set[str]) -> None:
    """Materialize every asset and check for these tasks with the real embedder and SmolLM2 GGUF through llama.cpp,
    assert what each stage wrote, then re-run the caching stages (embeddings, generations, feedback labels) and
    assert that they embed, generate and label nothing new."""
    config = write_config(tmp_path / "prag.toml", tmp_path / "home", cfrag={"max_feedback_samples": 4},
                          data={"demo_dev_samples": 3, "llm_eval_samples": 1, "tasks": tasks})  # fmt: skip
    result = materialize_graph(config, tasks)
    assert result.success
    checks = _check_results(result)
    failed = {name: severity for name, (passed, severity) in checks.items() if not passed}
    # Only a warning may fail: all candidates of every sample scoring alike is possible with a 135M model.
    assert len(checks) >= 20 and set(failed) <= {"feedback_labels:feedback_not_degenerate"}, failed
    assert all(severity == "WARN" for severity in failed.values())
    with duckdb.connect(str(load_settings(config).duckdb_path), read_only=True) as con:
        evaluation = con.execute("SELECT task, method, metric, value FROM lamp_evaluation").df()
        generations = con.execute("SELECT generator_id, answer_mode, output FROM generations").df()
        clusters = con.execute(
            "SELECT task, count(*) n, count(DISTINCT user_id) u FROM user_clusters GROUP BY task"
        ).df()
        versions = con.execute("SELECT task, kind, version FROM cfrag_models").df()
    assert set(evaluation["task"]) == set(tasks)
    for task in tasks:
        assert set(evaluation[evaluation["task"] == task]["method"]) == METHODS
    assert generations["generator_id"].str.startswith("llama_cpp:").all()
    assert set(generations["answer_mode"]) == answer_modes
    assert (generations["output"].str.len() > 0).mean() > 0.9
    assert (clusters["n"] == clusters["u"]).all() and set(clusters["task"]) == set(tasks)
    assert len(versions) == len(tasks) * 4 and (versions["version"] == 1).all()  # 4 registered models per task
    assert (tmp_path / "home" / "reports" / "lamp_evaluation.png").stat().st_size > 1000

    # the re-run: only the stages that cache (the rest re-computes by design), so it costs seconds, not a graph
    cached = dg.AssetSelection.assets("document_embeddings", "generations", "feedback_labels")
    again = materialize_graph(config, tasks, selection=cached)
    assert again.success
    assert all(m["newly_embedded"] == 0 for m in partition_metadata(again, "document_embeddings").values())
    per_task = partition_metadata(again, "generations")
    assert len(per_task) == len(tasks) and all(stats["model_calls_now"] == 0 for stats in per_task.values())
    feedback = partition_metadata(again, "feedback_labels")
    assert all(stats["labelled_now"] == 0 and stats["reused"] > 0 for stats in feedback.values())
