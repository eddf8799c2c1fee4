"""item_cf on the label-free path (issue 49, docs/methods.md §5.2 and §6.7): on LaMP files without relevance labels,
the LLM utility judges item_cf like every personalized method — a candidate of the pilot where no label sees the task,
chosen when its documents' utility is best, tested against dense_global and the own profile, and reported by the
verdict. A tiny world of the tagging family (items recur across users), its planted labels left behind, the whole
graph with the deterministic fake generator and item_cf among retrieval.methods."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import materialize_graph, write_config

from prag_models.data.demo import write_demo

TASKS = ["LaMP-2", "LaMP-7"]
METHODS = ["zero_shot", "dense", "dense_global", "clusterrag_community", "cfrag", "item_cf"]
UTILITY = {"pilot_samples": 4, "min_samples": 4}


@pytest.fixture(scope="module")
def label_free_tagging(tmp_path_factory) -> tuple[Path, Path]:
    """(config, home) of the tagging world's LaMP files without the manifest (the planted truth), materialized."""
    root = tmp_path_factory.mktemp("label_free_item_cf")
    files = root / "lamp"
    write_demo(files, users=24, communities=3, dev_samples=16, seed=11, tasks=TASKS, family="tagging")
    (files / "demo_manifest.json").unlink()  # the planted relevance labels stay behind
    config = write_config(
        root / "prag.toml", root / "home", generator_backend="fake",
        data={"source": "lamp", "lamp_dir": str(files), "tasks": TASKS}, retrieval={"k": 2, "methods": METHODS},
        tuning={"enabled": True, "budget_s": 2.0, "utility_budget_s": 2.0, "utility_samples": 4, "utility_trials": 2},
        utility=UTILITY,
    )  # fmt: skip
    result = materialize_graph(config, TASKS, raise_on_error=False)
    assert result.success
    return config, root / "home"


def test_item_cf_is_a_candidate_of_the_utility_pilot_without_labels(label_free_tagging) -> None:
    """LaMP-7 (no label sees it): the pilot that chooses the method scores item_cf beside the other personalized
    methods on every pilot sample, and the plan lists it among its candidates; LaMP-2 (its document labels see it):
    item_cf's rows are in the retrieval evaluation the labels choose from, and the utility tests that choice."""
    from prag_models.evaluation.utility import utility_plan

    _, home = label_free_tagging
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        plan = utility_plan(con, "LaMP-7")
        pilot = con.execute("SELECT method, count(DISTINCT sample_id) FROM llm_utility WHERE task = 'LaMP-7' "
                            "AND phase = 'pilot' GROUP BY method").fetchall()  # fmt: skip
        labelled = con.execute("SELECT DISTINCT method FROM lamp_retrieval_evaluation WHERE task = 'LaMP-2'").fetchall()
        plan_2 = utility_plan(con, "LaMP-2")
    assert plan is not None and plan["evidence"] == "pilot chose", plan
    candidates = plan["candidates"].split(", ")
    assert "item_cf" in candidates and len(candidates) > 1, candidates
    assert dict(pilot).get("item_cf") == plan["pilot_n"] == UTILITY["pilot_samples"], pilot
    assert ("item_cf",) in labelled
    assert plan_2 is not None and plan_2["evidence"] == "labels chose", plan_2


def test_the_pilot_can_choose_item_cf_and_the_verdict_reports_it(label_free_tagging, tmp_path) -> None:
    """Where item_cf's documents are the personalized ones the pilot finds best (here: the only personalized method
    left retrieving for every sample, on a copy of the store), the utility chooses it, tests it against dense_global
    and the own profile on fresh samples, and the verdict reports it as the task's method on that evidence."""
    from prag_models.config.settings import load_settings
    from prag_models.evaluation.claims import PERSONALIZED
    from prag_models.evaluation.utility import PLAN_TABLE, UTILITY_TABLE
    from prag_models.evaluation.verdict import verdicts_for
    from prag_models.llm.factory import make_generator
    from prag_models.stages.llm_utility import utility_rows
    from prag_models.storage.store import replace_many

    config, home = label_free_tagging
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    settings = load_settings(config, home=str(copy), environ={"PRAG__RUN__LLM_BUDGET_S": "0"})
    others = [m for m in PERSONALIZED if m != "item_cf"]
    with duckdb.connect(str(copy / "prag.duckdb")) as con:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '%_retrievals'"
                                    ).fetchall():  # fmt: skip
            con.execute(f"DELETE FROM {table} WHERE task = 'LaMP-7' AND method IN (SELECT unnest(?))", [others])
        frame, plan, stats = utility_rows(con, "LaMP-7", settings, make_generator(settings.generator))
        replace_many(con, [(UTILITY_TABLE, frame, {"task": "LaMP-7"}), (PLAN_TABLE, plan, {"task": "LaMP-7"})])
        verdict = verdicts_for(con, settings).set_index("task").loc["LaMP-7"]
    assert plan.at[0, "evidence"] == "pilot chose" and plan.at[0, "chosen"] == "item_cf", stats
    assert plan.at[0, "candidates"] == "item_cf"
    tested = frame[frame["phase"] == "test"]
    assert set(tested["method"]) == {"item_cf", "dense_global", "dense"} and plan.at[0, "test_n"] >= 4
    assert verdict["evidence"] == "LLM utility (no labels)" and verdict["metric"] == "utility"
    assert verdict["method"] == "item_cf" and verdict["n_samples"] == plan.at[0, "test_n"], verdict.to_dict()
