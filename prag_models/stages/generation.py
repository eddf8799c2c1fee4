"""Stage 5 (generation): one answer per (method, LLM-evaluation sample), batched and cached by prompt."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.source import llm_eval_sample_ids
from prag_models.generation.answers import ZERO_SHOT, PromptJob, answer_cached, answer_mode, build_jobs, run_jobs
from prag_models.generation.prompts import prompt_document
from prag_models.storage.store import table_exists

if TYPE_CHECKING:
    from prag_models.llm.base import Generator

#: Tables of retrieved documents that feed the generation stage (and the retrieval evaluation).
RETRIEVAL_TABLES = ("baseline_retrievals", "clusterrag_retrievals", "cfrag_retrievals", "pbr_lamp_retrievals")
GENERATION_COLUMNS = ["task", "method", "sample_id", "user_id", "generator_id", "answer_mode", "prompt_hash",
                      "output", "prediction", "gold"]  # fmt: skip


def retrieved_texts(con, task: str, methods: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """method → sample → texts of the retrieved documents in rank order (the given methods only), each sample's
    rankings cut to the count every one of those methods gives it (``common_count``); a text that stands for several
    users' identical documents (column ``writers``, item_cf) says how many."""
    from prag_models.storage.catalog import table_columns

    out: dict[str, dict[str, list[str]]] = {}
    for table in RETRIEVAL_TABLES:
        if not table_exists(con, table):
            continue
        writers = "r.writers" if "writers" in {c for c, _ in table_columns(con, table)} else "1"
        rows = con.execute(
            f"SELECT r.method, r.sample_id, p.text, p.fields_json, {writers} FROM {table} r JOIN profile_documents p "
            "ON p.task = r.task AND p.user_id = r.source_user_id AND p.doc_id = r.doc_id "
            "WHERE r.task = ? ORDER BY r.method, r.sample_id, r.rank",
            [task],
        ).fetchall()
        for method, sample_id, text, fields, count in rows:
            if method in methods:
                doc = prompt_document(task, text, json.loads(fields), count or 1)
                out.setdefault(method, {}).setdefault(sample_id, []).append(doc)
    return common_count(out)


def prompt_users(con, task: str, pairs: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Whose data the prompt of each (method, sample id) pair shows: the sample's user (input, gold) and the owners of
    the method's retrieved documents for the sample — for a text counted as written by several users (``writers``,
    item_cf), every user with that text, the count being their data too (a hidden copy's owner included: deleting
    more than needed is the safe side); the LLM caches record it (provenance, what forget deletes by)."""
    from prag_models.storage.catalog import table_columns

    who: dict[tuple[str, str], set[str]] = {}
    con.register("_prag_pairs", pd.DataFrame(list(pairs), columns=["method", "sample_id"], dtype="string"))
    try:
        tables = [t for t in RETRIEVAL_TABLES if table_exists(con, t)]
        parts = [f"SELECT p.method, p.sample_id, r.source_user_id FROM _prag_pairs p JOIN {t} r ON r.task = $task "
                 "AND r.method = p.method AND r.sample_id = p.sample_id" for t in tables]  # fmt: skip
        parts += [f"SELECT p.method, p.sample_id, c.user_id FROM _prag_pairs p JOIN {t} r ON r.task = $task "
                  "AND r.method = p.method AND r.sample_id = p.sample_id AND r.writers > 1 JOIN profile_documents d "
                  "ON d.task = $task AND d.user_id = r.source_user_id AND d.doc_id = r.doc_id JOIN profile_documents c "
                  "ON c.task = $task AND c.text = d.text" for t in tables
                  if "writers" in {name for name, _ in table_columns(con, t)}]  # fmt: skip
        parts.append("SELECT p.method, p.sample_id, s.user_id FROM _prag_pairs p JOIN lamp_samples s "
                     "ON s.task = $task AND s.sample_id = p.sample_id")  # fmt: skip
        for method, sample_id, user in con.execute(" UNION ".join(parts), {"task": task}).fetchall():
            who.setdefault((method, sample_id), set()).add(user)
    finally:
        con.unregister("_prag_pairs")
    return [sorted(who.get(pair, ())) for pair in pairs]


def common_count(docs: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    """Each sample's rankings cut to the fewest texts any method retrieved for it, so that every method an LLM
    comparison prompts shows as many texts as the others (docs/methods.md §0, "Like with like"); a method with no
    ranking for a sample does not count."""
    fewest: dict[str, int] = {}
    for by_sample in docs.values():
        for sample_id, texts in by_sample.items():
            fewest[sample_id] = min(fewest.get(sample_id, len(texts)), len(texts))
    return {m: {s: texts[: fewest[s]] for s, texts in by_sample.items()} for m, by_sample in docs.items()}


def generation_jobs(
    con, task: str, settings: Settings, generator: Generator, users: list[str] | None = None
) -> tuple[pd.DataFrame, list[PromptJob]]:
    """A task's LLM-evaluation samples (of the given users only, when given) and their prompt jobs."""
    methods = settings.retrieval.methods
    samples = con.execute(
        "SELECT sample_id, user_id, input, gold FROM lamp_samples WHERE task = ? AND split = 'dev' ORDER BY sample_id",
        [task],
    ).df()
    samples = samples[samples["sample_id"].isin(llm_eval_sample_ids(samples["sample_id"], settings))]
    if users is not None:
        samples = samples[samples["user_id"].isin(set(users))]
    jobs = build_jobs(
        task,
        dict(zip(samples["sample_id"], samples["input"], strict=True)),
        retrieved_texts(con, task, methods),
        generator,
        settings.prompt,
        zero_shot=ZERO_SHOT in methods,
    )
    return samples, jobs


def generation_rows(
    con, task: str, settings: Settings, generator: Generator, progress: Callable[[int, int], None] | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The generations of every configured method on a task's LLM-evaluation samples (cached prompts reused)."""
    samples, jobs = generation_jobs(con, task, settings, generator)
    mode = answer_mode(task, settings.generator)
    ran = 0
    who: dict[str, set[str]] = {}
    for job, users in zip(jobs, prompt_users(con, task, [(j.method, j.sample_id) for j in jobs]), strict=True):
        who.setdefault(job.prompt, set()).update(users)

    def answer(prompts: list[str]) -> list[str]:
        nonlocal ran
        outputs, now = answer_cached(task, generator, prompts, settings.generator, con, progress=progress,
                                     users=[who[p] for p in prompts])  # fmt: skip
        ran += now
        return outputs

    results = run_jobs(task, jobs, answer)
    meta = samples.set_index("sample_id")
    frame = pd.DataFrame(
        [
            (task, job.method, job.sample_id, meta.at[job.sample_id, "user_id"], generator.model_id, mode,
             hashlib.sha256(job.prompt.encode()).hexdigest(), raw, pred, meta.at[job.sample_id, "gold"])
            for job, raw, pred in results
        ],
        columns=GENERATION_COLUMNS,
    )  # fmt: skip
    stats = {
        "prompts": len(jobs),
        "answer_mode": mode,
        "model_calls_now": ran,
        "methods": int(frame["method"].nunique()),
        "samples": len(samples),
        # the count run.llm_budget_s left (prag_models/evaluation/llm_budget.py), with the budget it was sized to
        "llm_eval_samples": settings.data.llm_eval_samples,
        "generation_samples": settings.run.generation_samples,  # 0: deferred to `prag evidence` by the budget
        "llm_budget_s": settings.run.llm_budget_s,
        "generator": generator.model_id,
    }
    return frame, stats
