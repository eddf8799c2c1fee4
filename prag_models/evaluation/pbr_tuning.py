"""The cross-fitted search of PBR's knobs on a real dataset (docs/methods.md §4.7): per fold of persons (or
communities) the shared Optuna search (prag_models.evaluation.tuning.search) runs on the other folds' questions and
its choice ranks the fold; a last search on every question gives the values for data not seen yet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from prag_models.config.settings import PbrSettings, TuningSettings
from prag_models.evaluation.tuning import search
from prag_models.methods.pbr_knobs import (
    ALL_FOLDS,
    PBR_KNOB_SPACE,
    PRIMARY,
    TUNED_COLUMNS,
    PbrVectors,
    fold_of,
    knob_values_of,
    with_pbr_knobs,
)
from prag_models.metrics.intervals import paired_difference


@dataclass
class PbrTuning:
    """The search's outcome: settings per question (tuned without its fold), the values tuned on every question,
    the chosen-values rows (TUNED_COLUMNS), every trial and summary statistics."""

    per_question: dict[str, PbrSettings]
    deployed: PbrSettings
    rows: pd.DataFrame
    trials: pd.DataFrame
    stats: dict[str, Any]


def tune_pbr(
    dataset: str, vectors: PbrVectors, settings: PbrSettings, tuning: TuningSettings, n_folds: int
) -> PbrTuning:
    """Cross-fitted search of PBR's knobs: for each fold, the search runs on the other folds' questions and its
    choice ranks the fold's questions; a last search on every question gives the values for data not seen yet."""
    default = knob_values_of(settings)
    fold = fold_of(vectors.questions, n_folds)
    rows, trials, per_question, moved, held = [], [], {}, 0, ([], [])
    runs = []  # (fold name, questions the search scores, questions its choice ranks)
    for f in sorted(set(fold.values())):
        held_out = [q for q in vectors.questions if fold[q.q_id] == f]
        others = [q for q in vectors.questions if fold[q.q_id] != f]  # one person only: none, the default ranks it
        runs.append((str(f), others, held_out))
    runs.append((ALL_FOLDS, list(vectors.questions), []))
    budget = tuning.budget_s / len(runs)
    deployed = settings
    for name, train, held_out in runs:
        if train:
            chosen, tried, metric, _ = search(
                PBR_KNOB_SPACE, default, lambda v, qs=train: (f"{PRIMARY[0]}@{PRIMARY[1]}",
                                                              vectors.scores(qs, with_pbr_knobs(settings, v))),
                tuning.seed, tuning.max_trials, budget)  # fmt: skip
        else:
            chosen, tried, metric = default, [], f"{PRIMARY[0]}@{PRIMARY[1]}"
        tuned = with_pbr_knobs(settings, chosen)
        score = float(vectors.scores(train, tuned).mean()) if train else float("nan")
        default_score = float(vectors.scores(train, settings).mean()) if train else float("nan")
        rows += [(dataset, name, knob, str(chosen[knob]), str(default[knob]), score, default_score, metric,
                  len(tried), len(train), len(held_out)) for knob in PBR_KNOB_SPACE]  # fmt: skip
        trials += [(dataset, name, *t) for t in tried]
        per_question.update({q.q_id: tuned for q in held_out})
        held[0].extend(vectors.scores(held_out, tuned))
        held[1].extend(vectors.scores(held_out, settings))
        if name == ALL_FOLDS:
            deployed = tuned
        else:
            moved += chosen != default
    table = pd.DataFrame(rows, columns=TUNED_COLUMNS)
    tried_frame = pd.DataFrame(trials, columns=["dataset", "fold", "trial", "params", "score", "seconds"])
    gain = paired_difference(np.array(held[0]), np.array(held[1]))
    stats = {"folds": len(runs) - 1, "questions": len(vectors.questions), "folds_moved": int(moved),
             "held_out_tuned": float(np.mean(held[0])), "held_out_default": float(np.mean(held[1])),
             "held_out_gain": gain.value, "held_out_gain_low": gain.low, "held_out_gain_high": gain.high,
             "metric": f"{PRIMARY[0]}@{PRIMARY[1]}", "deployed": knob_values_of(deployed)}  # fmt: skip
    return PbrTuning(per_question, deployed, table, tried_frame, stats)


