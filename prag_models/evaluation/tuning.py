"""Per-task tuning of ClusterRAG's and item_cf's knobs (docs/methods.md §3.9, §5.2) and CFRAG's (§2.9) on the task's
TRAIN samples, never dev.

Each tunable method (prag_models.methods.knobs.KNOB_SPACE) gets an Optuna study (TPE, seeded) whose trial 0 is the
configured default; a trial retrieves for the train samples with the trial's knobs and scores them with the
retrieval evaluation's primary metric (NDCG@k where relevance labels exist, label-hit@k otherwise). The chosen values
are the best trial's when its paired train gain over the default has a 95 % interval above 0, else the default.
The search stops at tuning.max_trials per method or when the method's share of tuning.budget_s is spent (scored by
the LLM utility where no label sees the task: tuning.utility_trials, at most tuning.utility_budget_s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.truth import Truth, load_truth
from prag_models.evaluation.retrieval import per_sample_scores, primary_retrieval_metric
from prag_models.methods import clusterrag
from prag_models.methods.knobs import (
    CFRAG_KNOB_SPACE,
    KNOB_SPACE,
    UserSpace,
    default_values,
    knob_values,
    method_space,
    read_tuned_table,
    with_knobs,
)
from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.methods.task_tables import read_profile_index
from prag_models.methods.vector_index import numpy_blas_threads
from prag_models.storage.store import column_to_matrix
from prag_models.users.pool_quality import planted_from_table

if TYPE_CHECKING:
    from prag_models.llm.base import Generator

TUNED_COLUMNS = ["task", "method", "knob", "value", "default_value", "score", "default_score", "metric",
                 "n_trials", "n_samples"]  # fmt: skip
TRIAL_COLUMNS = ["task", "method", "trial", "params", "score", "seconds"]
#: The share of a task's search seconds (tuning.budget_s, or tuning.utility_budget_s) each method's search gets: half,
#: as when ClusterRAG's two methods shared it, so that item_cf's search takes nothing from theirs (or CFRAG's).
METHOD_BUDGET_SHARE = 0.5
#: Methods tuned only where labels see the task: a search by the LLM utility would add to the task's LLM budget.
LABEL_TUNED_ONLY: tuple[str, ...] = ("item_cf",)
#: A search's score of a trial: its top-k lists of the train samples -> (metric name, value per sample).
Scorer = Callable[[list], tuple[str, np.ndarray]]
#: Loads the generator when a search needs it (only where no label sees the task); None: never.
GeneratorSource = Callable[[], "Generator"] | None


def train_samples(con, task: str, dim: int, limit: int, seed: int) -> pd.DataFrame:
    """The task's train samples with their query vectors (a seeded subset of ``limit`` when there are more)."""
    table = con.sql(
        "SELECT s.sample_id, s.user_id, q.embedding FROM lamp_samples s JOIN query_embeddings q "
        "USING (task, sample_id) WHERE task = ? AND s.split = 'train' ORDER BY s.sample_id",
        params=[task],
    ).to_arrow_table()
    samples = table.drop(["embedding"]).to_pandas()
    samples["embedding"] = list(column_to_matrix(table["embedding"], dim))
    if limit and len(samples) > limit:
        keep = np.sort(np.random.default_rng(seed).choice(len(samples), size=limit, replace=False))
        samples = samples.iloc[keep].reset_index(drop=True)
    return samples


def retrieve(method: str, settings: Settings, space: UserSpace, index: ProfileIndex, samples: pd.DataFrame) -> list:
    """One tunable method's top-k for every sample under the given settings, in sample order."""
    k = settings.retrieval.k
    queries = column_to_matrix(samples["embedding"].tolist(), index.vectors.shape[1])
    users = samples["user_id"].tolist()
    if method == "clusterrag_community":
        return space.community(index, settings).retrieve_many(users, queries, k)
    if method == "item_cf":
        return space.item_cf(index, settings).retrieve_many(users, queries, k)
    mode = method.removeprefix("clusterrag_")
    nbs = space.neighbours(settings)
    with numpy_blas_threads(1):
        return [clusterrag.retrieve_profile_mode(index, mode, u, nbs.get(u, []), queries[i], k)
                for i, u in enumerate(users)]  # fmt: skip


def score(found: list[list[Retrieved]], samples: pd.DataFrame, truth: Truth, k: int) -> tuple[str, np.ndarray]:
    """The primary retrieval metric and its value per sample (in sample order)."""
    rows = [(s, rank, r.doc_id) for s, docs in zip(samples["sample_id"], found, strict=True)
            for rank, r in enumerate(docs, 1)]  # fmt: skip
    runs = pd.DataFrame(rows, columns=["sample_id", "rank", "doc_id"]).assign(method="m")
    ids = samples["sample_id"].astype(str).tolist()
    scores = per_sample_scores(runs, {"m": ids}, k, truth.relevant, truth.labels, truth.golds)
    metric = primary_retrieval_metric(truth.relevant is not None, k)
    values = scores[scores["metric"] == metric].set_index("sample_id")["value"]
    return metric, values.reindex(ids).to_numpy(dtype=float)


def search(
    space_of: Mapping[str, Sequence[Any]], default: dict[str, Any],
    evaluate: Callable[[dict[str, Any]], tuple[str, np.ndarray]], seed: int, max_trials: int, budget_s: float,
) -> tuple[dict[str, Any], list[tuple], str, Any]:  # fmt: skip
    """Optuna search (TPE, seeded; trial 0 = the default) over knob values, ``evaluate(values)`` scoring each train
    sample (metric name, per-sample scores): (chosen values, trials as (trial, params, score, seconds), metric, the
    best trial's paired train gain over the default). The best trial is chosen only when that gain's 95 % interval
    is above 0; otherwise the default stays (a noisy train score must not move a knob). Not cross-fitted: ranking
    the trials on half of the samples and confirming on the other half kept fewer than half of the dev gains at 16
    train samples and still let one harmful choice through (docs/methods.md §3.9)."""
    import optuna

    from prag_models.metrics.intervals import paired_difference

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    metric_name = [""]
    trials: list[tuple] = []
    per_sample: dict[int, np.ndarray] = {}

    def objective(trial: optuna.Trial) -> float:
        t0 = time.perf_counter()
        values = {knob: trial.suggest_categorical(knob, list(choices)) for knob, choices in space_of.items()}
        metric_name[0], per_sample[trial.number] = evaluate(values)
        value = float(np.nanmean(per_sample[trial.number])) if len(per_sample[trial.number]) else float("nan")
        trials.append((trial.number, json.dumps(values, sort_keys=True), value, round(time.perf_counter() - t0, 3)))
        return value

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial({k: v for k, v in default.items() if v in space_of[k]})
    study.optimize(objective, n_trials=max_trials, timeout=max(budget_s, 1e-3))
    best = study.best_trial  # the first trial with the best value: the default (trial 0) wins ties
    gain = paired_difference(per_sample[best.number], per_sample[0])
    chosen = {**default, **best.params} if gain.n > 0 and gain.low > 0 else default
    return chosen, trials, metric_name[0], gain


def tune_method(
    method: str, settings: Settings, space: UserSpace, index: ProfileIndex, samples: pd.DataFrame, scorer: Scorer,
    budget_s: float, max_trials: int,
) -> tuple[dict[str, Any], list[tuple], str, Any]:  # fmt: skip
    """One ClusterRAG method's search (:func:`search` over the method's knobs, ``method_space``)."""
    t = settings.tuning

    def run(values: dict[str, Any]) -> list:
        """The method's top-k for every sample with these knob values."""
        return retrieve(method, with_knobs(settings, values), space, index, samples)

    default = default_values(settings, method)
    return search(method_space(settings, method), default, lambda v: scorer(run(v)), t.seed, max_trials,
                  budget_s)  # fmt: skip


def train_scorer(
    con, task: str, settings: Settings, samples: pd.DataFrame, truth: Truth | None, generator: GeneratorSource
) -> tuple[pd.DataFrame, Scorer | None, float, int, str]:
    """(the samples a search scores, how a trial's top-k lists are scored, the search's seconds, its trials per
    method, why nothing is searched): the labels where they see the task (tuning.budget_s, tuning.max_trials), else
    the LLM utility on tuning.utility_samples train samples (tuning.utility_trials, at most tuning.utility_budget_s),
    else no scorer and the reason the defaults are kept."""
    from prag_models.evaluation.utility_objective import (
        UtilityObjective,
        label_free_plan,
        truth_sees,
        utility_search_budget_s,
        utility_tuning_asked,
    )

    k, t = settings.retrieval.k, settings.tuning
    if truth_sees(task, truth):
        return samples, lambda found: score(found, samples, truth, k), t.budget_s, t.max_trials, ""
    model = generator() if generator is not None and utility_tuning_asked(settings) else None
    ok, why = label_free_plan(task, settings, model)
    if not ok:
        return samples, None, 0.0, 0, why
    subset = samples.head(t.utility_samples).reset_index(drop=True)
    objective = UtilityObjective(con, task, settings, model)
    return subset, lambda found: objective(found, subset), utility_search_budget_s(settings), t.utility_trials, ""


def method_rows(
    task: str, method: str, chosen: dict[str, Any], default: dict[str, Any], trials: list[tuple], metric: str,
    gain: Any, n_samples: int, max_trials: int,
) -> tuple[list[tuple], list[tuple], dict[str, Any]]:  # fmt: skip
    """One method's tuned_settings rows (one per knob), its trial rows and its statistics (``stopped_by``: whether
    max_trials or the time budget ended the search)."""
    default_score = trials[0][2]
    best_score = max(s for _, _, s, _ in trials) if chosen != default else default_score
    rows = [(task, method, knob, json.dumps(value), json.dumps(default[knob]), best_score, default_score, metric,
             len(trials), n_samples) for knob, value in chosen.items()]  # fmt: skip
    stats = {"chosen": chosen, "score": round(best_score, 4), "default_score": round(default_score, 4),
             "metric": metric, "trials": len(trials), "distinct_settings": len({p for _, p, _, _ in trials}),
             "best_train_gain": [round(gain.value, 4), round(gain.low, 4), round(gain.high, 4)],
             "kept_default": chosen == default,
             "stopped_by": "max_trials" if len(trials) >= max_trials else "time budget"}  # fmt: skip
    return rows, [(task, method, *tr) for tr in trials], stats


def train_inputs(con, task: str, settings: Settings) -> tuple[ProfileIndex, pd.DataFrame, Truth | None]:
    """What a search scores: the shared view of the task's documents (the knobs hold for every user, so a train
    sample's own private documents are no more in its lists than another user's: docs/privacy.md), the train
    samples (empty: nothing to tune) and their truth limited to those documents."""
    from prag_models.privacy.shareable import shared_truth, shared_view

    index = shared_view(read_profile_index(con, task, default_share=settings.privacy.default_share))
    samples = train_samples(con, task, index.vectors.shape[1], settings.tuning.max_samples, settings.tuning.seed)
    if samples.empty:
        return index, samples, None
    return index, samples, shared_truth(load_truth(con, task, "train"), index.doc_ids.take(index.visible_rows(None)))


def search_inputs(
    con, task: str, settings: Settings, generator: GeneratorSource
) -> tuple[tuple[ProfileIndex, pd.DataFrame, Scorer, float, int] | None, dict[str, Any]]:
    """(the index, the samples a search scores, its scorer, seconds and trials per method), or None and the
    statistics of a task that is not searched (no train sample; no label and no utility budget: defaults kept); the
    statistics say ``by_labels`` when labels score the search."""
    from prag_models.evaluation.utility_objective import truth_sees

    index, samples, truth = train_inputs(con, task, settings)
    if samples.empty:
        return None, {"train_samples": 0}
    samples, scorer, budget_s, max_trials, why = train_scorer(con, task, settings, samples, truth, generator)
    if scorer is None:
        return None, {"train_samples": len(samples), "kept_default": True, "why": why}
    return (index, samples, scorer, budget_s, max_trials), {"by_labels": truth_sees(task, truth)}


def tune_task(
    con, task: str, settings: Settings, generator: GeneratorSource = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Tune every tunable method of a task on its train samples: the chosen values (one row per knob), every
    trial, and statistics (train sample ids used, per method the default's and the chosen score). Without labels
    that see the task, trials are scored by the LLM utility (``generator`` loads it), else the defaults are kept."""
    prepared, searched = search_inputs(con, task, settings, generator)
    if prepared is None:
        return pd.DataFrame(columns=TUNED_COLUMNS), pd.DataFrame(columns=TRIAL_COLUMNS), searched
    index, samples, scorer, budget_s, max_trials = prepared
    space = UserSpace(con, task, settings, index.vectors.shape[1])
    planted = planted_from_table(con, task)
    # item_cf only where labels score the search and the run retrieves with it (the demo's default does not)
    methods = [m for m in KNOB_SPACE if m not in LABEL_TUNED_ONLY
               or (searched["by_labels"] and m in settings.retrieval.methods)]  # fmt: skip
    space.prepare(settings, {m for method in methods
                             for m in method_space(settings, method).get("clustering.user_similarity", ())})
    chosen_rows, trial_rows, stats = [], [], {"train_samples": len(samples), "methods": {}}
    stats["sample_ids"] = samples["sample_id"].astype(str).tolist()
    for method in methods:
        budget = budget_s * METHOD_BUDGET_SHARE
        chosen, trials, metric, gain = tune_method(method, settings, space, index, samples, scorer, budget,
                                                   max_trials)  # fmt: skip
        default = default_values(settings, method)
        rows, tried, stats["methods"][method] = method_rows(task, method, chosen, default, trials, metric, gain,
                                                            len(samples), max_trials)  # fmt: skip
        if method.startswith("clusterrag_"):  # item_cf draws on no cluster
            # the chosen values' user clusters (the search's cached fit) and, on the demo, their ARI vs the planted
            stats["methods"][method] |= space.cluster_summary(with_knobs(settings, chosen), planted)
        chosen_rows += rows
        trial_rows += tried
    return pd.DataFrame(chosen_rows, columns=TUNED_COLUMNS), pd.DataFrame(trial_rows, columns=TRIAL_COLUMNS), stats


def read_tuned(con, task: str) -> dict[str, dict[str, Any]]:
    """The tuned values of a task per method (empty when the tuned_settings table or its rows are missing)."""
    return read_tuned_table(con, "tuned_settings", task)


def tune_cfrag(
    con, task: str, settings: Settings, generator: GeneratorSource = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Search CFRAG's knobs on the task's train samples before its training (docs/methods.md §2.9): the chosen
    values (one row per knob, the tuned_settings columns), every trial, and statistics (train samples, default and
    chosen score, the paired train gain)."""
    from prag_models.methods.cfrag import inference
    from prag_models.methods.cfrag.feedback import projection_targets
    from prag_models.methods.cfrag.tables import similar_user_lists
    from prag_models.methods.cfrag.tuning import METHOD, UntrainedCfrag
    from prag_models.storage.store import read_rows

    t = settings.tuning
    prepared, not_searched = search_inputs(con, task, settings, generator)
    if prepared is None:
        return pd.DataFrame(columns=TUNED_COLUMNS), pd.DataFrame(columns=TRIAL_COLUMNS), not_searched
    index, samples, scorer, budget_s, max_trials = prepared
    users = read_rows(con, "cfrag_user_embeddings", {"task": task})
    user_emb = dict(zip(users["user_id"], column_to_matrix(users["embedding"].tolist()), strict=True))
    queries = [inference.CfragQuery(s.sample_id, s.user_id, "", np.asarray(s.embedding, dtype=np.float32),
                                    user_emb[s.user_id]) for s in samples.itertuples(index=False)]  # fmt: skip
    untrained = UntrainedCfrag(index, queries, settings, *projection_targets(con, task))
    neighbours: dict[tuple[int, str], dict[str, list[str]]] = {}

    def run(values: dict[str, Any]) -> list:
        """Untrained CFRAG's final top-k of every train sample with these knob values."""
        s = with_knobs(settings, values)
        key = (s.cfrag.top_m_users, s.cfrag.user_vectors)
        if key not in neighbours:
            neighbours[key] = similar_user_lists(con, task, s)
        return untrained.retrieve(neighbours[key], s)

    default = knob_values(settings, CFRAG_KNOB_SPACE)
    budget = budget_s * METHOD_BUDGET_SHARE  # the share of each ClusterRAG method
    chosen, trials, metric, gain = search(CFRAG_KNOB_SPACE, default, lambda v: scorer(run(v)), t.seed, max_trials,
                                          budget)  # fmt: skip
    rows, tried, stats = method_rows(task, METHOD, chosen, default, trials, metric, gain, len(samples), max_trials)
    return (pd.DataFrame(rows, columns=TUNED_COLUMNS), pd.DataFrame(tried, columns=TRIAL_COLUMNS),
            {"train_samples": len(samples), "methods": {METHOD: stats}})  # fmt: skip
