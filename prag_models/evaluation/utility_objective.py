"""Tuning without labels (docs/methods.md §3.9, §6.7): a trial's top-k lists of train samples scored by the LLM's
utility of their documents, within a time budget; where no label sees a task and no budget or log-likelihood is
available, the defaults are kept and the statistics say so."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.truth import Truth
from prag_models.evaluation.utility import LABEL_HIT_SEES, UTILITY_METRIC, gold_answer, per_token, utility_values
from prag_models.generation.answers import lamp_prompt
from prag_models.generation.prompts import prompt_document

if TYPE_CHECKING:
    from prag_models.llm.base import Generator
    from prag_models.methods.profiles import Retrieved


def truth_sees(task: str, truth: Truth | None) -> bool:
    """Whether labels can score the task's retrieval: relevance labels, or LaMP-2/3's document labels."""
    if truth is None:
        return False
    return truth.relevant is not None or (task in LABEL_HIT_SEES and truth.labels is not None)


class UtilityObjective:
    """Per-sample utility of retrieved top-k lists of a task's train samples (cached prompts cost nothing), and the
    seconds of LLM work spent so far."""

    def __init__(self, con, task: str, settings: Settings, generator: Generator) -> None:
        self.con, self.task, self.settings, self.generator = con, task, settings, generator
        rows = con.execute(
            "SELECT user_id, doc_id, text, fields_json FROM profile_documents WHERE task = ?", [task]
        ).fetchall()
        self.texts = {(str(u), str(d)): prompt_document(task, t, json.loads(f)) for u, d, t, f in rows}
        samples = con.execute(
            "SELECT sample_id, input, gold FROM lamp_samples WHERE task = ? AND split = 'train'", [task]
        ).fetchall()
        self.inputs = {str(s): (str(i), gold_answer(task, g)) for s, i, g in samples}
        self.seconds = 0.0

    def __call__(self, found: list[list[Retrieved]], samples: pd.DataFrame) -> tuple[str, np.ndarray]:
        """(utility, its value per sample) of the top-k lists, in sample order."""
        ids = samples["sample_id"].astype(str).tolist()
        prompts = [
            lamp_prompt(self.task, self.inputs[s][0], [self.texts[(r.source_user_id, r.doc_id)] for r in docs],
                        self.generator, self.settings.prompt)
            for s, docs in zip(ids, found, strict=True)
        ]  # fmt: skip
        # the cache's provenance: the sample's user (input and gold) and the owners of the documents shown
        users = [[u, *(r.source_user_id for r in docs)] for u, docs in zip(samples["user_id"], found, strict=True)]
        started = time.perf_counter()
        logliks, tokens, _ = utility_values(self.con, self.generator, prompts, [self.inputs[s][1] for s in ids],
                                            self.settings.generator.batch_size, users=users)  # fmt: skip
        self.seconds += time.perf_counter() - started
        return UTILITY_METRIC, per_token(logliks, tokens)


def utility_tuning_asked(settings: Settings) -> bool:
    """Whether the settings ask for tuning by the LLM utility at all (trials, samples and seconds above 0)."""
    t = settings.tuning
    return t.utility_trials > 0 and t.utility_samples > 0 and t.utility_budget_s > 0


def utility_search_budget_s(settings: Settings) -> float:
    """A task's seconds for the search by the LLM utility: tuning.utility_budget_s, or the run's budget cut of it on
    this machine (run.utility_tuning_s, set by `prag materialize`)."""
    configured, cut = settings.tuning.utility_budget_s, settings.run.utility_tuning_s
    return configured if cut < 0 else min(configured, cut)


def label_free_plan(task: str, settings: Settings, generator: Generator | None) -> tuple[bool, str]:
    """(whether the utility can tune the task, why not when it cannot)."""
    from prag_models.evaluation.utility import can_score

    t = settings.tuning
    if t.utility_trials <= 0 or t.utility_samples <= 0:
        return False, "no labels see this task and tuning.utility_trials = 0: the defaults are kept"
    if t.utility_budget_s <= 0:
        return False, "no labels see this task and tuning.utility_budget_s = 0: the defaults are kept"
    if utility_search_budget_s(settings) <= 0:
        return False, ("no labels see this task and the run's budget (run.budget_s) pays no search by the LLM utility "
                       "on this machine: the defaults are kept")  # fmt: skip
    if generator is None or not can_score(generator):
        return False, "no labels see this task and the generator exposes no log-likelihoods: the defaults are kept"
    return True, ""


def kept_defaults(why: str) -> dict[str, Any]:
    """The statistics of a task whose knobs were not searched."""
    return {"kept_default": True, "why": why}
