"""The CFRAG feedback loop (docs/methods.md §2.4–2.6): candidates of the selected train samples, their LLM feedback
labels (reused when stored, each finished batch written at once) and the training set the retriever and reranker
learn from."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.generation.answers import lamp_prompt
from prag_models.generation.prompts import prompt_document
from prag_models.methods.cfrag.candidates import cosine_scorer, per_user_top_k, select_feedback_samples
from prag_models.methods.cfrag.feedback_labels import (
    degenerate_samples,
    feedback_max_new_tokens,
    feedback_prompt_version,
    feedback_scores,
)
from prag_models.methods.cfrag.tables import model_row, neighbour_lists
from prag_models.methods.cfrag.teacher import ORACLE_OUTPUT, oracle_scores
from prag_models.methods.cfrag.training_set import TrainingSet, training_set
from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.methods.task_tables import profile_index

if TYPE_CHECKING:
    from prag_models.methods.cfrag.feedback_probe import ProbeResult
from prag_models.storage.store import column_to_matrix, read_rows, table_exists

FEEDBACK_TABLE = "feedback_labels"
FEEDBACK_KEY = ["task", "sample_id", "doc_id", "source_user_id", "generator_id", "prompt_version"]
FEEDBACK_COLUMNS = [*FEEDBACK_KEY, "output", "score"]


@dataclass
class FeedbackInputs:
    """A task's profile index, the selected training samples and their m·k candidates (§2.4–2.5)."""

    index: ProfileIndex  # its shared view (privacy.shareable): only shareable documents, the asker's own included
    prompt_docs: list[str]  # each index row as the prompt shows it
    samples: pd.DataFrame  # sample_id, user_id, input, query, gold, embedding
    candidates: dict[str, list[Retrieved]]


def load_feedback_inputs(con, task: str, settings: Settings) -> FeedbackInputs:
    """Selected train samples and their candidates: top-k docs by base dense cosine from each of the m similar users,
    read from the shared view — the labels train the retriever and reranker every user is served with, so a sample's
    own private documents are no candidates either (docs/privacy.md)."""
    from prag_models.privacy.shareable import shared_view

    index, docs = profile_index(con, task, default_share=settings.privacy.default_share)
    index = shared_view(index)
    prompt_docs = [
        prompt_document(task, t, json.loads(f)) for t, f in zip(docs["text"], docs["fields_json"], strict=True)
    ]
    train = _train_samples(con, task)
    c = settings.cfrag
    chosen = set(select_feedback_samples(train["sample_id"].tolist(), c.max_feedback_samples, c.seed))
    samples = train[train["sample_id"].isin(chosen)].reset_index(drop=True)
    return FeedbackInputs(index, prompt_docs, samples, _candidates(con, task, index, samples, settings))


def _train_samples(con, task: str) -> pd.DataFrame:
    """A task's train samples with their query vectors, by sample id."""
    return con.execute(
        "SELECT s.sample_id, s.user_id, s.input, s.query, s.gold, q.embedding FROM lamp_samples s "
        "JOIN query_embeddings q USING (task, sample_id) WHERE task = ? AND s.split = 'train' ORDER BY s.sample_id",
        [task],
    ).df()


def _candidates(con, task: str, index: ProfileIndex, samples: pd.DataFrame, settings: Settings) -> dict:
    """Each sample's m·k candidates: the top-k docs by base dense cosine from each of the m similar users (§2.4), at
    most cfrag.feedback_max_users of them."""
    neighbours, k, cap = neighbour_lists(con, task), settings.cfrag.docs_per_user, settings.cfrag.feedback_max_users
    return {
        s.sample_id: per_user_top_k(
            index, s.user_id, neighbours.get(s.user_id, [s.user_id])[:cap], k, cosine_scorer(index, s.embedding)
        )
        for s in samples.itertuples(index=False)
    }


def truth_validation_set(
    con, task: str, settings: Settings, inputs: FeedbackInputs
) -> tuple[TrainingSet, dict[str, str]]:
    """The task's other train samples (no feedback labels, so no LLM call) with their candidates and a zero teacher,
    for validating on the truth (cfrag.truth_validation), and their query texts; empty when turned off."""
    train = _train_samples(con, task) if settings.cfrag.truth_validation else pd.DataFrame()
    rest = train[~train["sample_id"].isin(set(inputs.samples["sample_id"]))] if len(train) else train
    if rest.empty:
        return training_set(inputs.index, rest, {}, pd.DataFrame(columns=["sample_id"]), {}), {}
    candidates = _candidates(con, task, inputs.index, rest, settings)
    zeros = pd.DataFrame([(sid, c.doc_id, c.source_user_id, 0.0) for sid, cs in candidates.items() for c in cs],
                         columns=["sample_id", "doc_id", "source_user_id", "score"])  # fmt: skip
    users = read_rows(con, "cfrag_user_embeddings", {"task": task})
    emb = dict(zip(users["user_id"], users["embedding"], strict=True))
    return training_set(inputs.index, rest, candidates, zeros, emb), dict(zip(rest["sample_id"], rest["query"],
                                                                                  strict=True))


def existing_labels(con, task: str, generator_id: str, prompt_version: str) -> pd.DataFrame:
    """The feedback labels already stored for this task, generator and prompt version."""
    if not table_exists(con, FEEDBACK_TABLE):
        return pd.DataFrame(columns=FEEDBACK_COLUMNS)
    return read_rows(
        con, FEEDBACK_TABLE, {"task": task, "generator_id": generator_id, "prompt_version": prompt_version}
    )


def append_labels(con, frame: pd.DataFrame) -> None:
    """Insert finished labels at once (creating the table), so an interrupted run keeps them."""
    con.register("_feedback_incoming", frame)
    try:
        if not table_exists(con, FEEDBACK_TABLE):
            con.execute(f"CREATE TABLE {FEEDBACK_TABLE} AS SELECT * FROM _feedback_incoming")
        else:
            con.execute(f"INSERT INTO {FEEDBACK_TABLE} BY NAME SELECT * FROM _feedback_incoming")
    finally:
        con.unregister("_feedback_incoming")


def feedback_todo(
    con, task: str, settings: Settings, generator_id: str, users: list[str] | None = None
) -> tuple[FeedbackInputs, list[tuple[Any, Retrieved]]]:
    """A task's feedback inputs and the (sample, candidate) pairs without a stored label (of the given users' samples
    only, when given; the samples are selected among all users' first, so a user shard asks for the same labels)."""
    inputs = load_feedback_inputs(con, task, settings)
    have = existing_labels(con, task, generator_id, feedback_prompt_version(task, settings))
    done = set(zip(have["sample_id"], have["source_user_id"], have["doc_id"], strict=True))
    wanted = None if users is None else set(users)
    todo = [
        (s, c)
        for s in inputs.samples.itertuples(index=False)
        if wanted is None or s.user_id in wanted
        for c in inputs.candidates[s.sample_id]
        if (s.sample_id, c.source_user_id, c.doc_id) not in done
    ]
    return inputs, todo


def feedback_prompts(
    task: str, inputs: FeedbackInputs, pairs: list[tuple[Any, Retrieved]], generator: Any, settings: Settings
) -> tuple[list[str], list[str]]:
    """The feedback prompt (the sample's input with that one candidate document) and the gold of each pair."""
    prompts = [lamp_prompt(task, s.input, [inputs.prompt_docs[c.row]], generator, settings.prompt) for s, c in pairs]
    return prompts, [s.gold for s, _ in pairs]


def label_task(
    con, task: str, settings: Settings, generator: Any, log: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Generate and score the missing feedback labels of one task, a batch at a time; with a probe
    (cfrag.feedback_probe_samples) the probe's samples first, and the rest only where the probe shows the teacher's
    headroom over cosine (or cfrag.feedback_force); returns its statistics and the probe's decision."""
    from prag_models.methods.cfrag import feedback_probe as fp

    inputs, todo = feedback_todo(con, task, settings, generator.model_id)
    version = feedback_prompt_version(task, settings)
    total = sum(len(v) for v in inputs.candidates.values())
    log(f"{task} feedback: {total - len(todo)}/{total} labels exist, {len(todo)} to generate")
    gains = fp.candidate_gains(con, task, inputs)
    probe = fp.probe_sample_ids(inputs.samples["sample_id"].tolist(), gains, settings)
    base = {"task": task, "generator_id": generator.model_id, "prompt_version": version,
            "probe_samples": len(probe or []), "budget_samples": len(inputs.samples)}  # fmt: skip
    started, generated, labelled = time.perf_counter(), 0, 0
    if probe is None:
        result = fp.ProbeResult(**base, decision=fp.NO_PROBE, reason="no probe (cfrag.feedback_probe_samples): "
                                "whole budget")  # fmt: skip
    else:
        pilot, probe = probe, list(probe)
        cost = _probe_cost(settings, inputs, todo, pilot, total)  # None: not limited
        if cost is not None and cost.least_prompts > cost.prompts_paid and not settings.cfrag.feedback_force:
            result = fp.not_measured(base, cost.least_samples, cost.buys, cost.least_prompts * cost.seconds_per_prompt)
            log(f"{task} feedback probe: {result.decision}: {result.reason}")
            fp.write_probe(con, result)
            return _label_stats(con, task, settings, inputs, generator, version, result, [], total, 0, 0, started)
        generated, labelled = _label_pairs(con, task, settings, generator, inputs, _of(todo, pilot), log)
        have = existing_labels(con, task, generator.model_id, version)
        teacher, init = fp.headroom_differences(inputs, have, gains, pilot, settings)
        affordable = None if cost is None or settings.cfrag.feedback_force else cost.second_stage_samples()
        second, needed = fp.second_stage_ids(inputs.samples["sample_id"].tolist(), gains, pilot, teacher - init,
                                             settings, affordable)  # fmt: skip
        if second:  # decided on fresh samples, as many as the pilot's spread says the interval needs
            more, now = _label_pairs(con, task, settings, generator, inputs, _of(todo, second), log)
            generated, labelled, probe = generated + more, labelled + now, [*pilot, *second]
            have = existing_labels(con, task, generator.model_id, version)
        base |= {"probe_samples": len(probe), "pilot_samples": len(pilot), "decided_on": len(second or pilot)}
        if affordable is not None and needed > affordable:  # the interval needs more than the budget pays
            result = fp.not_measured(base, len(pilot) + needed, len(pilot) + affordable,
                                     cost.pilot_prompts * cost.seconds_per_prompt + needed * cost.sample_seconds())
        else:
            result = fp.decide(base, fp.measure_headroom(inputs, have, gains, second or pilot, settings),
                               settings.cfrag.feedback_force)  # fmt: skip
        log(f"{task} feedback probe ({len(pilot)} pilot + {len(second)} samples): {result.decision}: {result.reason}")
        todo = [] if result.decision in fp.UNTRAINED else [p for p in todo if p[0].sample_id not in set(probe)]
        if cost is not None and not settings.cfrag.feedback_force:  # the rest of the labels, as the share pays
            todo = _whole_samples(todo, cost.prompts_paid - labelled)
    fp.write_probe(con, result)
    more, now = _label_pairs(con, task, settings, generator, inputs, todo, log)
    return _label_stats(con, task, settings, inputs, generator, version, result, probe or [], total,
                        generated + more, labelled + now, started)  # fmt: skip


@dataclass(frozen=True)
class _ProbeCost:
    """What a task's probe costs in prompts on this machine, and what its share of run.feedback_budget_s pays."""

    prompts_paid: float
    seconds_per_prompt: float
    pilot_prompts: int  # the pilot's unlabelled pairs
    second_prompts_per_sample: float  # a second-stage sample's unlabelled pairs, on average
    min_second: int
    pilot_samples: int
    per_sample: float  # candidates a sample has

    @property
    def least_prompts(self) -> float:
        """The pilot and the smallest second stage."""
        return self.pilot_prompts + self.min_second * self.second_prompts_per_sample

    @property
    def least_samples(self) -> int:
        return self.pilot_samples + self.min_second

    @property
    def buys(self) -> int:
        """Samples the share pays for when none is labelled yet."""
        return int(self.prompts_paid // max(self.per_sample, 1e-9))

    def second_stage_samples(self) -> int | None:
        """Second-stage samples the share pays for after the pilot (None: they are labelled already)."""
        if self.second_prompts_per_sample <= 0:
            return None
        return int(max(0.0, self.prompts_paid - self.pilot_prompts) // self.second_prompts_per_sample)

    def sample_seconds(self) -> float:
        return self.second_prompts_per_sample * self.seconds_per_prompt


def _probe_cost(settings: Settings, inputs: FeedbackInputs, todo: list, pilot: list[str], total: int,
                ) -> _ProbeCost | None:  # fmt: skip
    """The probe's cost and pay on this machine, counting only pairs without a stored label; None without a
    feedback budget or a measured speed (feedback_probe.probe_seconds)."""
    from prag_models.methods.cfrag import feedback_probe as fp

    paid = fp.probe_seconds(settings)
    if paid is None:
        return None
    share_s, per_prompt = paid
    pilot_set = set(pilot)
    pilot_candidates = sum(len(inputs.candidates[s]) for s in pilot)
    pilot_todo = sum(1 for s, _ in todo if s.sample_id in pilot_set)
    per_sample = total / max(len(inputs.samples), 1)
    rest_share = (len(todo) - pilot_todo) / max(total - pilot_candidates, 1)
    return _ProbeCost(share_s / max(per_prompt, 1e-9), per_prompt, pilot_todo, per_sample * rest_share,
                      settings.cfrag.feedback_probe_min_samples, len(pilot), per_sample)  # fmt: skip


def _label_stats(con, task: str, settings: Settings, inputs: FeedbackInputs, generator: Any, version: str,
                 result: ProbeResult, probe: list[str], total: int, generated: int, labelled: int,
                 started: float) -> dict[str, Any]:  # fmt: skip
    """The feedback stage's statistics of one task (its partition's metadata)."""
    from prag_models.methods.cfrag import feedback_probe as fp

    seconds = time.perf_counter() - started
    kept = set(probe) if result.decision in fp.UNTRAINED else set(inputs.samples["sample_id"])
    labels = existing_labels(con, task, generator.model_id, version)
    labels = labels[labels["sample_id"].isin(kept)]
    degenerate, n_samples = degenerate_samples(labels)
    return {
        "samples": len(kept),
        "budget_samples": len(inputs.samples),
        "candidates_per_sample": round(total / max(len(inputs.samples), 1), 2),
        "labels": len(labels),
        "reused": len(labels) - labelled,
        "labelled_now": labelled,
        "llm_generations_now": generated,
        "seconds": round(seconds, 2),
        "labels_per_second": round(labelled / seconds, 2) if labelled and seconds > 0 else None,
        "mean_score": round(float(labels["score"].mean()), 4) if len(labels) else None,
        "degenerate_share": round(degenerate / n_samples, 3) if n_samples else None,
        "prompt_version": version,
        "signal": settings.cfrag.feedback_signal,
        "probe": result.metadata(),
    }


def _whole_samples(todo: list, prompts: float) -> list:
    """The (sample, candidate) pairs of the first samples whose pairs all fit ``prompts`` (no sample half labelled)."""
    kept, used = [], 0
    by_sample: dict[str, list] = {}
    for pair in todo:
        by_sample.setdefault(pair[0].sample_id, []).append(pair)
    for pairs in by_sample.values():
        if used + len(pairs) > prompts:
            break
        kept, used = kept + pairs, used + len(pairs)
    return kept


def _of(todo: list, sample_ids: list[str]) -> list:
    """The (sample, candidate) pairs of the given samples."""
    wanted = set(sample_ids)
    return [p for p in todo if p[0].sample_id in wanted]


def _label_pairs(
    con, task: str, settings: Settings, generator: Any, inputs: FeedbackInputs, todo: list, log: Callable[[str], None]
) -> tuple[int, int]:
    """Label (sample, candidate) pairs a batch at a time, each batch written when done; (model calls, labels)."""
    batch = max(1, settings.generator.batch_size)
    version = feedback_prompt_version(task, settings)
    max_new = feedback_max_new_tokens(task, settings)
    started, generated = time.perf_counter(), 0
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        if settings.cfrag.feedback_signal == "oracle":  # a teacher of known quality: the truth, no LLM call
            scores, outputs, new = oracle_scores(con, task, chunk, settings), [ORACLE_OUTPUT] * len(chunk), 0
        else:
            prompts, golds = feedback_prompts(task, inputs, chunk, generator, settings)
            users = [[s.user_id, c.source_user_id] for s, c in chunk]  # the input and gold, and the candidate's owner
            scores, outputs, new = feedback_scores(task, generator, prompts, golds, settings, con, max_new, users)
        generated += new
        rows = [
            (task, s.sample_id, c.doc_id, c.source_user_id, generator.model_id, version, out, score)
            for (s, c), out, score in zip(chunk, outputs, scores, strict=True)
        ]
        append_labels(con, pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))
        finished = start + len(chunk)
        rate = finished / max(time.perf_counter() - started, 1e-9)
        log(f"{task} feedback: {finished}/{len(todo)} new labels ({rate:.2f} labels/s)")
    return generated, len(todo)


def load_training_set(
    con, task: str, settings: Settings, generator_id: str
) -> tuple[FeedbackInputs, TrainingSet, pd.DataFrame, str]:
    """The labelled candidate lists of a task, the label rows used, and the encoder version behind e_u."""
    inputs = load_feedback_inputs(con, task, settings)
    labels = existing_labels(con, task, generator_id, feedback_prompt_version(task, settings))
    labels = labels[labels["sample_id"].isin(set(inputs.samples["sample_id"]))]
    users = read_rows(con, "cfrag_user_embeddings", {"task": task})
    emb = dict(zip(users["user_id"], users["embedding"], strict=True))
    ts = training_set(inputs.index, inputs.samples, inputs.candidates, labels, emb)
    if not ts.sample_ids:
        raise LookupError(f"{task}: no feedback labels for {generator_id}: materialize feedback_labels first")
    encoder = model_row(con, task, "user_encoder")
    used = labels[["sample_id", "source_user_id", "doc_id", "score"]].sort_values(
        ["sample_id", "source_user_id", "doc_id"]
    )
    return inputs, ts, used.reset_index(drop=True), f"{encoder['registered_name']}/{encoder['version']}"


def projection_targets(con, task: str) -> tuple[np.ndarray, np.ndarray]:
    """(e_u, z_u) of every user: the CFRAG user embeddings and the unit mean document embeddings (W's start)."""
    from prag_models.users.embeddings import normalize_rows

    rows = con.execute(
        "SELECT c.embedding AS e, u.embedding AS z FROM cfrag_user_embeddings c JOIN user_embeddings u "
        "USING (task, user_id) WHERE task = ? ORDER BY user_id",
        [task],
    ).fetchall()
    e = column_to_matrix([r[0] for r in rows])
    return e, normalize_rows(column_to_matrix([r[1] for r in rows]))
