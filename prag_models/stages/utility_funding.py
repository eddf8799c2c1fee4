"""How the LLM utility's budget buys whole tests (issue 47, docs/methods.md §6.7): each task is funded with the
seconds of its pilot and smallest deciding test at this machine's measured seconds per prompt, tasks no label sees
first; a task not funded is answered from the cache or deferred to the LLM evidence run (`prag evidence`)."""

from __future__ import annotations

from prag_models.config.settings import Settings
from prag_models.evaluation.claims import PERSONALIZED
from prag_models.evaluation.retrieval import LLM_SUBSET_METHODS
from prag_models.evaluation.utility import DEFERRED, PLAN_TABLE, labelled_choice, plan_key
from prag_models.storage.store import table_exists

#: How much more of the utility's budget a task no label sees gets than one whose label verdict it only confirms: its
#: test is the verdict (three prompts a sample against two) and it has no other evidence.
EVIDENCE_WEIGHT = 3


def prompts_needed(labelled: bool, settings: Settings) -> int:
    """Prompts of a task's pilot and smallest deciding test: labelled, the chosen method and dense_global; without
    labels, every candidate, dense_global and dense on the pilot and three prompts a test sample."""
    u = settings.utility
    if labelled:
        return 2 * (u.pilot_samples + u.min_samples)
    candidates = len([m for m in PERSONALIZED if m not in LLM_SUBSET_METHODS])
    return u.pilot_samples * (candidates + 2) + 3 * u.min_samples


def task_budgets(con, settings: Settings, total_s: float, per_prompt_s: float,
                 complete: frozenset[str] = frozenset(), decided: frozenset[str] = frozenset(),
                 ) -> dict[str, float]:  # fmt: skip
    """Each task's seconds of the utility's budget, a whole test at a time: tasks no label sees first (the utility
    is their only evidence), then data.tasks' order; each is funded with its pilot and smallest deciding test while
    the budget lasts, and what is left is shared by the funded tasks, those no label sees weighing EVIDENCE_WEIGHT.
    A task not funded gets 0 (only what is cached; its test is deferred), and so does a task whose test an earlier
    run completed (``complete``: answered from the cache). Without a measured cost per prompt, every task is funded
    by weight alone. Fixed by the data, the settings and the machine's speed, not by any test outcome."""
    labelled = {t: labelled_choice(con, t) is not None for t in settings.data.tasks}
    return fund_whole_tests(labelled, settings, total_s, per_prompt_s, complete, decided)


def fund_whole_tests(labelled: dict[str, bool], settings: Settings, total_s: float, per_prompt_s: float,
                     complete: frozenset[str] = frozenset(), decided: frozenset[str] = frozenset(),
                     ) -> dict[str, float]:  # fmt: skip
    """task_budgets on given tasks (in data.tasks order) and whether labels decide each; tasks whose test already
    decided (``decided``: at least utility.min_samples, cut short of its planned n) come after those with none."""
    tasks = list(labelled)
    weights = {t: 1 if labelled[t] else EVIDENCE_WEIGHT for t in tasks}
    if per_prompt_s <= 0 or total_s <= 0:
        return {t: total_s * weights[t] / max(1, sum(weights.values())) for t in tasks}
    funded: dict[str, float] = {}
    left = total_s
    order = sorted((t for t in tasks if t not in complete), key=lambda t: (t in decided, labelled[t], tasks.index(t)))
    for task in order:
        need = prompts_needed(labelled[task], settings) * per_prompt_s
        if need <= left:
            funded[task], left = need, left - need
    share = sum(weights[t] for t in funded)
    return {t: funded[t] + left * weights[t] / share if t in funded else 0.0 for t in tasks}


def stopped_flag(row: dict) -> bool:
    """Whether a stored plan row says its interim look stopped the test (absent or NULL on older rows: no)."""
    return row.get("stopped_early") in (True, 1)


def completed_tasks(con, settings: Settings, generator_id: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the tasks whose stored plan, for these settings and generator, ran its whole planned test: the LLM evidence
    run answers them from the cache; the tasks whose test decided but was cut short of its planned n)."""
    if not table_exists(con, PLAN_TABLE):
        return frozenset(), frozenset()
    prefix = plan_key(settings, generator_id)
    rows = con.execute(f"SELECT * FROM {PLAN_TABLE}").df().to_dict("records")
    ours = [(r["task"], int(r["test_n"]), int(r["planned_n"]), stopped_flag(r)) for r in rows
            if r["evidence"] != DEFERRED and str(r["key"]).startswith(prefix)]  # fmt: skip
    complete = frozenset(t for t, n, planned, stopped in ours if n >= planned or stopped)
    return complete, frozenset(t for t, n, _, _ in ours if n >= settings.utility.min_samples) - complete


def utility_share(settings: Settings) -> float:
    """The utility's share of run.llm_budget_s: utility.budget_share, or all of it when the run's budget deferred the
    generated outputs and P-PRF (run.generation_samples = 0), whose share would otherwise go unspent."""
    return 1.0 if settings.run.generation_samples == 0 else settings.utility.budget_share


def task_budget_s(con, task: str, settings: Settings, evidence_run: bool = False, per_prompt_s: float | None = None,
                  generator_id: str = "") -> float:  # fmt: skip
    """The task's seconds: of run.evidence_budget_s in the LLM evidence run (tasks an earlier run completed
    excluded), else of the utility's share of run.llm_budget_s (task_budgets); 0 = only what is cached."""
    run = settings.run
    total = run.evidence_budget_s if evidence_run else run.llm_budget_s * utility_share(settings)
    if per_prompt_s is None:
        per_prompt_s = measured_prompt_s(settings)
    complete, decided = completed_tasks(con, settings, generator_id) if evidence_run else (frozenset(), frozenset())
    return task_budgets(con, settings, total, per_prompt_s, complete, decided).get(task, 0.0)


def measured_prompt_s(settings: Settings) -> float:
    """Seconds per utility prompt as `prag materialize` measured this machine (0 when it did not)."""
    from prag_models.evaluation.llm_budget import stored_throughput

    speeds = stored_throughput(settings)
    return speeds.per_utility_prompt() if speeds is not None else 0.0
