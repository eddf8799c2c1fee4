"""The graph on LaMP files without relevance labels (issue 40): the demo's own files with the planted labels withheld,
as real LaMP files come. Every task gets a verdict naming its evidence: labels where they see the task (LaMP-2/3's
document labels), the LLM utility elsewhere; tuning and the checks run without labels."""

import shutil
from pathlib import Path

import duckdb
import pytest
from conftest import materialize_graph, write_config

from prag_models.data.demo import write_demo

TASKS = ["LaMP-2", "LaMP-4", "LaMP-7"]


@pytest.fixture(scope="module")
def label_free_run(tmp_path_factory) -> tuple[Path, object]:
    """A tiny demo world's LaMP files without its manifest (the planted truth), materialized with source = lamp."""
    root = tmp_path_factory.mktemp("label_free")
    return root, materialize_graph(_label_free_world(root, TASKS, seed=11, trials=3), TASKS, raise_on_error=False)


def _label_free_world(root: Path, tasks: list[str], seed: int, trials: int) -> Path:
    """A tiny demo world's LaMP files of the tasks under root, its planted relevance labels left behind, and the
    config of a run on them (source = lamp, the fake generator, small tuning and utility sizes)."""
    files = root / "lamp"
    write_demo(files, users=24, communities=3, dev_samples=16, seed=seed, tasks=tasks)
    (files / "demo_manifest.json").unlink()  # the planted relevance labels stay behind
    return write_config(
        root / "prag.toml", root / "home", generator_backend="fake",
        data={"source": "lamp", "lamp_dir": str(files), "tasks": tasks},
        tuning={"enabled": True, "budget_s": 2.0, "utility_budget_s": 2.0, "utility_samples": 4,
                "utility_trials": trials},
        utility={"pilot_samples": 4, "min_samples": 4},
    )  # fmt: skip


def test_label_free_files_run_to_the_end_with_a_verdict_per_task_naming_its_evidence(label_free_run):
    root, result = label_free_run
    assert result.success
    from prag_models.evaluation.verdict import verdicts_from_store

    with duckdb.connect(str(root / "home" / "prag.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM lamp_samples WHERE task = 'LaMP-4'").fetchone()[0] > 0
        verdicts = verdicts_from_store(con, min_utility_samples=4).set_index("task")
        plans = con.execute("SELECT task, evidence, chosen, test_n FROM llm_utility_plans").df().set_index("task")
    assert set(verdicts.index) == set(TASKS)
    assert verdicts.at["LaMP-2", "evidence"].startswith("retrieval (label_hit")
    for task in ("LaMP-4", "LaMP-7"):
        assert verdicts.at[task, "evidence"] == "LLM utility (no labels)"
        assert verdicts.at[task, "metric"] == "utility"
        assert plans.at[task, "evidence"] == "pilot chose" and plans.at[task, "test_n"] >= 4
        assert verdicts.at[task, "n_samples"] == plans.at[task, "test_n"]
    assert plans.at["LaMP-2", "evidence"] == "labels chose"
    assert verdicts.at["LaMP-2", "llm_metric"] == "utility"  # the LLM leg of a labelled task is the utility too


def test_without_labels_tuning_scores_trials_by_utility_or_keeps_the_defaults_and_says_so(label_free_run):
    root, _ = label_free_run
    with duckdb.connect(str(root / "home" / "prag.duckdb"), read_only=True) as con:
        metrics = dict(con.execute("SELECT task, any_value(metric) FROM tuned_settings GROUP BY task").fetchall())
    assert metrics.get("LaMP-4") == "utility" and metrics.get("LaMP-7") == "utility"
    assert metrics.get("LaMP-2", "").startswith("label_hit")


def test_pilot_and_test_samples_never_overlap(label_free_run):
    root, _ = label_free_run
    with duckdb.connect(str(root / "home" / "prag.duckdb"), read_only=True) as con:
        overlap = con.execute(
            "SELECT count(*) FROM (SELECT DISTINCT task, sample_id FROM llm_utility WHERE phase = 'pilot') p "
            "JOIN (SELECT DISTINCT task, sample_id FROM llm_utility WHERE phase = 'test') t USING (task, sample_id)"
        ).fetchone()[0]
    assert overlap == 0


@pytest.mark.parametrize(("knob", "said"), [("UTILITY_BUDGET_S", "utility_budget_s = 0"),
                                            ("UTILITY_TRIALS", "utility_trials = 0")])  # fmt: skip
def test_without_utility_trials_or_budget_the_defaults_are_kept_and_said(label_free_run, tmp_path, knob, said):
    from prag_models.config.settings import TuningSettings, load_settings
    from prag_models.evaluation.tuning import tune_task

    assert TuningSettings().utility_trials > 0  # on by default since every ranking shows a text once
    root, _ = label_free_run
    copy = tmp_path / "home"
    shutil.copytree(root / "home", copy)
    settings = load_settings(root / "prag.toml", home=str(copy), environ={f"PRAG__TUNING__{knob}": "0"})
    with duckdb.connect(str(copy / "prag.duckdb")) as con:
        chosen, trials, stats = tune_task(con, "LaMP-4", settings, lambda: pytest.fail("no generator needed"))
    assert chosen.empty and stats["kept_default"] and "defaults are kept" in stats["why"] and said in stats["why"]


def test_without_labels_the_search_runs_its_trial_count_whatever_the_seconds(label_free_run, tmp_path):
    """The knobs chosen without labels must not depend on the machine's load: the search stops at
    tuning.utility_trials, not when a time share runs out (tuning.utility_budget_s is only an upper limit)."""
    from prag_models.config.settings import load_settings
    from prag_models.evaluation.tuning import tune_task
    from prag_models.llm.factory import make_generator

    root, _ = label_free_run
    copy = tmp_path / "home"
    shutil.copytree(root / "home", copy)
    environ = {"PRAG__TUNING__UTILITY_TRIALS": "5", "PRAG__TUNING__UTILITY_BUDGET_S": "600"}
    settings = load_settings(root / "prag.toml", home=str(copy), environ=environ)
    with duckdb.connect(str(copy / "prag.duckdb")) as con:
        _, trials, stats = tune_task(con, "LaMP-4", settings, lambda: make_generator(settings.generator))
    per_method = trials.groupby("method").size()
    assert set(per_method) == {5}, per_method
    assert all(s["stopped_by"] == "max_trials" for s in stats["methods"].values())


def test_no_ranking_shows_a_text_twice(label_free_run):
    """LaMP-7 of a demo world repeats its tweets word for word; every method's top k holds each text once (a method
    whose k documents are one text repeated is not compared like for like with one that shows k texts)."""
    root, _ = label_free_run
    with duckdb.connect(str(root / "home" / "prag.duckdb"), read_only=True) as con:
        docs, texts = con.execute("SELECT count(*), count(DISTINCT text) FROM profile_documents "
                                  "WHERE task = 'LaMP-7'").fetchone()  # fmt: skip
        assert texts < docs  # the world does repeat texts
        tables = [t for (t,) in con.execute("SHOW TABLES").fetchall() if t.endswith("_retrievals")]
        assert {"baseline_retrievals", "clusterrag_retrievals"} <= set(tables)
        for table in tables:
            repeated = con.execute(
                f"SELECT r.method, r.sample_id, count(*) - count(DISTINCT p.text) FROM {table} r JOIN "
                "profile_documents p ON p.task = r.task AND p.user_id = r.source_user_id AND p.doc_id = r.doc_id "
                "GROUP BY ALL HAVING count(*) > count(DISTINCT p.text)"
            ).fetchall()
            assert not repeated, (table, repeated[:5])


def test_a_run_of_label_free_tasks_alone_ends_with_verdicts_decided_by_the_utility(tmp_path):
    """Issue 48, defect 0: with no task that labels can score, the retrieval evaluation still writes its (empty)
    tables, its blocking check passes, and the LLM utility decides every task (it failed on the missing table)."""
    tasks = ["LaMP-4", "LaMP-5", "LaMP-7"]
    result = materialize_graph(_label_free_world(tmp_path, tasks, seed=13, trials=2), tasks, raise_on_error=False)
    failed = [e.asset_check_key.name for e in result.get_asset_check_evaluations() if not e.passed]
    assert result.success and not failed, failed
    from prag_models.evaluation.verdict import verdicts_from_store

    with duckdb.connect(str(tmp_path / "home" / "prag.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM lamp_retrieval_evaluation").fetchone()[0] == 0
        verdicts = verdicts_from_store(con, min_utility_samples=4).set_index("task")
    assert set(verdicts.index) == set(tasks)
    assert set(verdicts["evidence"]) == {"LLM utility (no labels)"}, verdicts["evidence"]


def test_a_test_the_budget_cannot_pay_is_deferred_and_the_evidence_run_decides_it(label_free_run, tmp_path):
    """Issue 47: on a slow machine the utility's budget was spread over every task and bought n = 1 each. Now a
    task is funded only with its whole test (pilot + utility.min_samples) at the machine's measured seconds per
    prompt: unfunded and not cached, it is deferred (a plan row, no rows, the verdict says so); `prag evidence`
    (the evidence run's budget) then decides it; and a later main run answers it from the cache."""
    import json

    from prag_models.config.settings import load_settings
    from prag_models.evaluation.llm_budget import Throughput, budget_path, machine_key
    from prag_models.evaluation.utility import PLAN_TABLE, UTILITY_TABLE
    from prag_models.evaluation.verdict import verdicts_from_store
    from prag_models.llm.factory import make_generator
    from prag_models.stages.llm_utility import DEFERRED, utility_rows
    from prag_models.storage.store import replace_many

    root, _ = label_free_run
    copy = tmp_path / "home"
    shutil.copytree(root / "home", copy)
    environ = {"PRAG__RUN__LLM_BUDGET_S": "30", "PRAG__RUN__EVIDENCE_BUDGET_S": "100000",
               "PRAG__UTILITY__PILOT_SAMPLES": "4", "PRAG__UTILITY__MIN_SAMPLES": "4"}  # fmt: skip
    settings = load_settings(root / "prag.toml", home=str(copy), environ=environ)
    slow = Throughput(scored_s=2.0, generated_s=2.0, prompt_tokens_per_s=100.0, measured_in_s=1.0, utility_s=2.0)
    path = budget_path(settings)
    path.write_text(json.dumps({"throughput": slow.__dict__, "machine_key": machine_key(settings)}), "utf-8")
    generator = make_generator(settings.generator)
    with duckdb.connect(str(copy / "prag.duckdb")) as con:
        con.execute("DELETE FROM generation_cache WHERE generator_id LIKE '%#utility%'")  # nothing cached
        frame, plan, stats = utility_rows(con, "LaMP-4", settings, generator)
        assert frame.empty and plan.at[0, "evidence"] == DEFERRED and "deferred" in stats, stats
        cached = "SELECT count(*) FROM generation_cache WHERE generator_id LIKE '%#utility%'"
        assert con.execute(cached).fetchone()[0] == 0  # no LLM call spent on a test it could not finish
        replace_many(con, [(UTILITY_TABLE, frame, {"task": "LaMP-4"}), (PLAN_TABLE, plan, {"task": "LaMP-4"})])
        row = verdicts_from_store(con, min_utility_samples=4).set_index("task").loc["LaMP-4"]
        assert row["verdict"] == "keep the baseline" and "prag evidence" in row["power_note"], row["power_note"]

        frame, plan, stats = utility_rows(con, "LaMP-4", settings, generator, evidence_run=True)
        assert plan.at[0, "evidence"] == "pilot chose" and plan.at[0, "test_n"] >= 4, stats
        replace_many(con, [(UTILITY_TABLE, frame, {"task": "LaMP-4"}), (PLAN_TABLE, plan, {"task": "LaMP-4"})])
        row = verdicts_from_store(con, min_utility_samples=4).set_index("task").loc["LaMP-4"]
        assert row["evidence"] == "LLM utility (no labels)" and row["n_samples"] == plan.at[0, "test_n"]

        again, replanned, stats = utility_rows(con, "LaMP-4", settings, generator)  # the main job's budget again
        assert stats["from_cache_only"] and stats["prompts_computed"] == 0, stats
        assert replanned.at[0, "test_n"] == plan.at[0, "test_n"] and len(again) == len(frame)


def test_a_stored_plan_decided_on_another_pilot_is_not_reused(label_free_run, tmp_path):
    """Issue 48, defect 1: a stored plan was reused whenever its settings matched, so after new documents (or any
    change of the retrievals) the verdict read a stale chosen method the test had not scored. A plan is now keyed by
    the values of the pilot it was decided on: one decided on another pilot is planned again."""
    from prag_models.config.settings import load_settings
    from prag_models.evaluation.utility import PLAN_TABLE
    from prag_models.llm.factory import make_generator
    from prag_models.stages.llm_utility import utility_rows

    root, _ = label_free_run
    copy = tmp_path / "home"
    shutil.copytree(root / "home", copy)
    settings = load_settings(root / "prag.toml", home=str(copy), environ={"PRAG__RUN__LLM_BUDGET_S": "0"})
    generator = make_generator(settings.generator)
    with duckdb.connect(str(copy / "prag.duckdb")) as con:
        _, plan, _ = utility_rows(con, "LaMP-7", settings, generator)
        chosen, others = plan.at[0, "chosen"], [c for c in plan.at[0, "candidates"].split(", ")]
        stale = plan.copy()
        stale.at[0, "chosen"] = next(c for c in others if c != chosen)
        stale.at[0, "key"] = plan.at[0, "key"].split("#pilot:")[0]  # as stored before: the settings alone
        con.execute(f"DELETE FROM {PLAN_TABLE} WHERE task = 'LaMP-7'")
        con.register("stale", stale)
        con.execute(f"INSERT INTO {PLAN_TABLE} BY NAME SELECT * FROM stale")
        frame, again, _ = utility_rows(con, "LaMP-7", settings, generator)
    assert again.at[0, "chosen"] == chosen and again.at[0, "key"] == plan.at[0, "key"]
    tested = set(frame.loc[frame["phase"] == "test", "method"])
    assert chosen in tested  # the verdict's chosen method has test rows


def test_the_generated_outputs_beside_a_label_free_verdict_skip_the_pilots_samples(label_free_run):
    """Issue 48, defect 3: the LLM evaluation column beside a label-free verdict was scored on the first samples of
    the seeded order, which are the pilot's, whose utility chose the method; it now leaves them out."""
    from prag_models.evaluation.verdict import verdicts_from_store

    root, _ = label_free_run
    with duckdb.connect(str(root / "home" / "prag.duckdb"), read_only=True) as con:
        verdicts = verdicts_from_store(con, min_utility_samples=4).set_index("task")
        for task in ("LaMP-4", "LaMP-7"):
            pilot = {s for (s,) in con.execute("SELECT DISTINCT sample_id FROM llm_utility WHERE task = ? AND "
                                               "phase = 'pilot'", [task]).fetchall()}  # fmt: skip
            generated = {s for (s,) in con.execute("SELECT DISTINCT sample_id FROM generations WHERE task = ?",
                                                   [task]).fetchall()}  # fmt: skip
            assert pilot & generated  # the same seeded order: the first generated samples are the pilot's
            assert verdicts.at[task, "llm_n_samples"] == len(generated - pilot), task


def test_a_cached_pilot_still_costs_its_measured_seconds(label_free_run, tmp_path):
    """Issue 48, defect 5: with every pilot prompt cached the measured cost per prompt was 0, so the test's size
    ignored the budget. The machine's measured seconds per prompt now stand in for a pilot that cost nothing."""
    import json

    from prag_models.config.settings import load_settings
    from prag_models.evaluation.llm_budget import Throughput, budget_path, machine_key
    from prag_models.llm.factory import make_generator
    from prag_models.stages.llm_utility import prompts_needed, utility_rows

    root, _ = label_free_run
    copy = tmp_path / "home"
    shutil.copytree(root / "home", copy)
    environ = {"PRAG__UTILITY__PILOT_SAMPLES": "4", "PRAG__UTILITY__MIN_SAMPLES": "4"}
    settings = load_settings(root / "prag.toml", home=str(copy), environ=environ)
    with duckdb.connect(str(copy / "prag.duckdb")) as con:  # the pilot's prompts cached by an earlier run
        utility_rows(con, "LaMP-4", settings, make_generator(settings.generator))
        con.execute("DELETE FROM llm_utility_plans")
    slow = Throughput(scored_s=1.0, generated_s=1.0, prompt_tokens_per_s=100.0, measured_in_s=1.0, utility_s=1.0)
    path = budget_path(settings)
    path.write_text(json.dumps({"throughput": slow.__dict__, "machine_key": machine_key(settings)}), "utf-8")
    # a budget that funds LaMP-4's whole test and little more: the plan's cap must follow it, not every sample
    need = prompts_needed(False, settings) * 1.0
    budget = load_settings(root / "prag.toml", home=str(copy), environ={
        **environ, "PRAG__RUN__LLM_BUDGET_S": str((need + 6) / settings.utility.budget_share)})  # fmt: skip
    with duckdb.connect(str(copy / "prag.duckdb")) as con:
        _, plan, stats = utility_rows(con, "LaMP-4", budget, make_generator(settings.generator))
    assert plan.at[0, "seconds_per_prompt"] == 1.0, stats
    rest = 16 - 4  # the tiny world's dev samples after the pilot
    assert plan.at[0, "affordable_n"] < rest, plan.to_dict("records")
