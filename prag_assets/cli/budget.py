"""The run's time budgets on the command line (issue 47): `prag materialize` measures this machine and sizes the main
job to run.budget_s (prag_models/evaluation/run_budget.py, llm_budget.py), saying each cut; `prag evidence` runs the
LLM evidence the main job deferred (job prag_llm_evidence) within run.evidence_budget_s, continuing from the cache."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

from prag_assets.cli import run_summary
from prag_models.config.settings import ALL_TASKS, Settings, load_settings
from prag_models.storage.files import write_json_atomic


def sized_settings(settings: Settings) -> Settings:
    """The run's settings sized to this machine: run.llm_budget_s lowered to what run.budget_s leaves the LLM,
    run.feedback_budget_s set (unless configured) and run.generation_samples to what the LLM evaluation's share pays;
    each part said on one line, the whole stored as reports/run_budget.json."""
    from prag_models.evaluation import llm_budget
    from prag_models.evaluation.run_budget import corpus_texts, embedder_speed, label_free_tasks, split_budget
    from prag_models.llm.factory import make_generator

    run = settings.run
    if run.llm_budget_s <= 0 and run.budget_s <= 0:
        return settings
    reports = settings.home_path / "reports"
    path = llm_budget.budget_path(settings)
    if llm_budget.stored_throughput(settings, path) is None:
        cap = max(llm_budget.MEASURE_MIN_S, llm_budget.MEASURE_SHARE * run.llm_budget_s)
        run_summary.say(f"measuring this machine: the embedder, and the generator on each task's own prompts "
                        f"(about {cap:.0f} s at most)")  # fmt: skip
    started = time.perf_counter()
    try:
        documents, texts = corpus_texts(settings)
    except (OSError, ValueError) as error:  # the run's first stage reports the data's error in its own words
        run_summary.say(f"run budget: the data cannot be read to size the run ({type(error).__name__}); no cut")
        documents, texts = 0, []
    measured_embedder = run.budget_s > 0 and texts
    docs_per_s, _ = embedder_speed(settings, texts, reports / "embedder_speed.json") if measured_embedder else (0, 0)
    first, reused = llm_budget.plan_run(settings, path, lambda: make_generator(settings.generator))
    measured = 0.0 if reused else time.perf_counter() - started
    if run.budget_s > 0:
        free = label_free_tasks(settings)
        budget = split_budget(settings, documents, docs_per_s, measured, len(free))
        for line in budget.lines():
            run_summary.say(line)
        llm_s = max(1.0, budget.llm_s) if run.llm_budget_s > 0 else budget.llm_s
        feedback_s = run.feedback_budget_s if run.feedback_budget_s >= 0 else budget.feedback_s
        sized = run.model_copy(update={"llm_budget_s": llm_s, "feedback_budget_s": feedback_s})
        settings = sized_tuning(settings.model_copy(update={"run": sized}), free, budget.tuning_s,
                                first.throughput.per_utility_prompt())  # fmt: skip
        reports.mkdir(parents=True, exist_ok=True)
        write_json_atomic(reports / "run_budget.json", budget.metadata(), indent=1)
    plan = llm_budget.plan(settings, first.throughput) if run.budget_s > 0 else first
    run_summary.say(plan.line() + (" [stored speeds reused]" if reused else ""))
    return settings.model_copy(update={"run": settings.run.model_copy(
        update={"generation_samples": plan.generation_samples})})  # fmt: skip


def sized_tuning(settings: Settings, tasks: list[str], seconds: float, utility_prompt_s: float) -> Settings:
    """run.utility_tuning_s: tuning.utility_budget_s cut to the budget's share for the search of knobs by the LLM
    utility on the tasks no label sees (said on one line); a search whose method share cannot pay two trials (the
    default and one other) is not run: the defaults are kept there."""
    from prag_models.evaluation.run_budget import utility_search_s
    from prag_models.evaluation.tuning import METHOD_BUDGET_SHARE

    configured = utility_search_s(settings)
    if not tasks or configured <= 0 or seconds >= len(tasks) * configured:
        return settings
    t = settings.tuning
    per_task = t.utility_budget_s * seconds / (len(tasks) * configured)
    trial_s = t.utility_samples * max(utility_prompt_s, 0.0)
    if per_task * METHOD_BUDGET_SHARE < 2 * trial_s:  # each method's share of a task's seconds
        per_task = 0.0
    said = (f"at most {per_task:.0f} s a task" if per_task else "not run (a search needs two trials, "
            f"≈ {4 * trial_s:.0f} s a task): the default knobs are kept")  # fmt: skip
    run_summary.say(f"tuning without labels ({', '.join(tasks)}): {said}; tuning.utility_budget_s "
                    f"{t.utility_budget_s:.0f} s configured")  # fmt: skip
    return settings.model_copy(update={"run": settings.run.model_copy(update={"utility_tuning_s": per_task})})


def child_env(settings: Settings) -> dict[str, str]:
    """The sized settings a run's child process gets (the environment overrides the TOML file)."""
    return {"PRAG__RUN__GENERATION_SAMPLES": str(settings.run.generation_samples),
            "PRAG__RUN__LLM_BUDGET_S": repr(float(settings.run.llm_budget_s)),
            "PRAG__RUN__FEEDBACK_BUDGET_S": repr(float(settings.run.feedback_budget_s)),
            "PRAG__RUN__EVIDENCE_BUDGET_S": repr(float(settings.run.evidence_budget_s)),
            "PRAG__RUN__UTILITY_TUNING_S": repr(float(settings.run.utility_tuning_s))}  # fmt: skip


def deferred_note(settings: Settings) -> list[str]:
    """What the run's budget did not pay, each with its cost on this machine ([] when nothing): the utility tests
    deferred to `prag evidence`, and the feedback probes not measured (CFRAG keeps its initialisation)."""
    from prag_models.methods.cfrag.feedback_probe import NOT_MEASURED, PROBE_TABLE
    from prag_models.storage.store import DuckDBBusyError, read_connection

    try:
        with read_connection(settings.duckdb_path) as (con, _):
            return budget_cuts(con, settings, NOT_MEASURED, PROBE_TABLE)
    except (FileNotFoundError, DuckDBBusyError):
        return []


def budget_cuts(con, settings: Settings, not_measured: str, probe_table: str) -> list[str]:  # noqa: ANN001
    """deferred_note's lines, read on an open connection."""
    from prag_models.evaluation.utility import DEFERRED, PLAN_TABLE
    from prag_models.storage.store import table_exists

    lines = []
    tasks = list(settings.data.tasks)
    if settings.run.generation_samples == 0:
        lines.append(f"the generated outputs and P-PRF on LaMP ({settings.data.llm_eval_samples} samples a task) did "
                     "not fit this run's budget whole: `prag evidence` runs them (their figures are not shown until "
                     "then)")  # fmt: skip
    if table_exists(con, PLAN_TABLE):
        sql = f"SELECT task, budget_s FROM {PLAN_TABLE} WHERE evidence = ? ORDER BY task"
        rows = [(t, float(s)) for t, s in con.execute(sql, [DEFERRED]).fetchall() if t in tasks]
        if rows:
            lines.append(f"the LLM evidence of {', '.join(t for t, _ in rows)} did not fit this run's budget (≈ "
                         f"{sum(s for _, s in rows):.0f} s on this machine): `prag evidence` continues it "
                         f"(run.evidence_budget_s = {settings.run.evidence_budget_s:.0f} s a run, from the cached "
                         "scores)")  # fmt: skip
    if table_exists(con, probe_table):
        probes = [t for (t,) in con.execute(f"SELECT DISTINCT task FROM {probe_table} WHERE decision = ? ORDER BY "
                                            "task", [not_measured]).fetchall() if t in tasks]  # fmt: skip
        if probes:
            lines.append(f"the CFRAG feedback probe of {', '.join(probes)} was not measured on this machine (its "
                         "share of run.feedback_budget_s pays fewer samples than its test needs): CFRAG keeps its "
                         "initialised retriever and rerankers there")  # fmt: skip
    return lines


def deferred_generation(settings: Settings) -> bool:
    """Whether the main job deferred P-PRF generation on a real-data set (query_expansions without P-PRF rows)."""
    from prag_models.storage.store import DuckDBBusyError, read_connection, table_exists

    try:
        with read_connection(settings.duckdb_path) as (con, _):
            if not table_exists(con, "query_expansions"):
                return True
            with_prf = {d for (d,) in con.execute("SELECT DISTINCT dataset FROM query_expansions WHERE method = "
                                                  "'p_prf'").fetchall()}  # fmt: skip
    except (FileNotFoundError, DuckDBBusyError):
        return False
    return not set(settings.pbr.datasets) <= with_prf


def evidence_settings(settings: Settings) -> tuple[Settings, str]:
    """(the evidence run's settings, the line saying it): the generated outputs and P-PRF on LaMP are run whole
    (data.llm_eval_samples a task) when run.evidence_budget_s pays them after the deferred utility tests, their
    seconds then taken from the utility's part, else they stay deferred."""
    from prag_models.evaluation.llm_budget import per_sample_seconds, stored_throughput
    from prag_models.evaluation.utility import DEFERRED, PLAN_TABLE
    from prag_models.storage.store import DuckDBBusyError, read_connection, table_exists

    run, n = settings.run, settings.data.llm_eval_samples
    speeds = stored_throughput(settings)
    if run.evidence_budget_s <= 0 or n <= 0 or speeds is None:
        return settings, ""
    utility_s, done = 0.0, 0
    try:
        with read_connection(settings.duckdb_path) as (con, _):
            if table_exists(con, PLAN_TABLE):
                sql = f"SELECT coalesce(sum(budget_s), 0) FROM {PLAN_TABLE} WHERE evidence = ?"
                utility_s = float(con.execute(sql, [DEFERRED]).fetchone()[0])
            if table_exists(con, "generations"):
                counts = dict(con.execute("SELECT task, count(DISTINCT sample_id) FROM generations GROUP BY task")
                              .fetchall())  # fmt: skip
                done = min((int(counts.get(t, 0)) for t in settings.data.tasks), default=0)
    except (FileNotFoundError, DuckDBBusyError):
        pass
    need = 0.0 if done >= n else per_sample_seconds(settings, speeds) * n
    left = run.evidence_budget_s - utility_s
    if need > left:
        line = (f"the generated outputs and P-PRF on LaMP ({n} samples a task, ≈ {need:.0f} s) stay deferred: the "
                f"deferred utility tests take ≈ {utility_s:.0f} s of this run's {run.evidence_budget_s:.0f} s "
                "(raise --budget to run them too)")  # fmt: skip
        return settings.model_copy(update={"run": run.model_copy(update={"generation_samples": 0})}), line
    line = f"the generated outputs and P-PRF on LaMP: {n} samples a task (≈ {need:.0f} s)" if need else ""
    sized = run.model_copy(update={"generation_samples": -1,
                                   "evidence_budget_s": max(1.0, run.evidence_budget_s - need)})  # fmt: skip
    return settings.model_copy(update={"run": sized}), line


@dataclass(frozen=True)
class EvidenceHelpers:
    """The `prag` command's own functions the evidence command reuses (commands.py), passed in to avoid a cycle."""

    launch: Callable[..., tuple[int, run_summary.RunSummary]]
    lock_path: Callable[[Settings], object]
    recover: Callable[[Settings], None]
    publish: Callable[[Settings, int], None]


def add_evidence_command(sub: argparse._SubParsersAction, helpers: EvidenceHelpers) -> None:
    """Register `prag evidence`."""
    e = sub.add_parser("evidence", help="run the LLM evidence the main job's budget deferred (job prag_llm_evidence)")
    e.add_argument("--budget", type=_seconds, default=None,
                   help="seconds this run may spend (default run.evidence_budget_s; 0 = every test as planned)")
    e.set_defaults(func=lambda args: _evidence(args, helpers))


def _seconds(text: str) -> float:
    """A --budget value: seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the budget is 0 (every test as planned) or more seconds")
    return value


def _evidence(args: argparse.Namespace, helpers: EvidenceHelpers) -> int:
    """`prag evidence`: the utility tests the main job deferred, a whole test at a time, then the verdict."""
    from prag_assets.automation.demo_job import EVIDENCE_JOB, REAL_EVIDENCE_JOB
    from prag_assets.cli.doctor import exclusive

    settings = load_settings()
    if args.budget is not None:
        settings = settings.model_copy(update={"run": settings.run.model_copy(
            update={"evidence_budget_s": args.budget})})  # fmt: skip
    tasks = [t for t in ALL_TASKS if t in settings.data.tasks]
    if not tasks:
        print("no tasks configured (data.tasks)", flush=True)
        return 2
    started = time.time()
    with exclusive(helpers.lock_path(settings), "prag evidence"):
        helpers.recover(settings)
        run_summary.say(f"LLM evidence: the deferred utility tests within {settings.run.evidence_budget_s:.0f} s "
                        "(run.evidence_budget_s), continuing from the cached scores")  # fmt: skip
        settings, line = evidence_settings(settings)
        if line:
            run_summary.say(line)
        code, summary = helpers.launch(settings, "", f"{tasks[0]}...{tasks[-1]}", tasks, False, started,
                                       EVIDENCE_JOB, "prag evidence")  # fmt: skip
        helpers.publish(settings, code)
        summaries = [summary]
        if settings.data.real_data_dir and deferred_generation(settings):  # P-PRF on LongMemEval, where deferred
            real, summary = helpers.launch(settings, "", None, tasks, False, started, REAL_EVIDENCE_JOB,
                                           "prag evidence")  # fmt: skip
            helpers.publish(settings, real)
            summaries.append(summary)
            code = code or real
    run_summary.print_summary(settings, summaries, time.time() - started, code, verdict=True)
    for line in deferred_note(settings):
        run_summary.say(line)
    return code
