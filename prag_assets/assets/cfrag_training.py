"""CFRAG stage 2 (docs/methods.md §2.4–2.7): LLM feedback labels, then the personalized retriever and reranker
trained on
them by distillation, each registered in MLflow."""

import dataclasses
import json
import time
from dataclasses import dataclass

import dagster as dg
import pandas as pd

from prag_assets.assets.cfrag_users import (
    GROUP,
    cfrag_similar_users,
    cfrag_user_embeddings,
    has_table,
    loss_curve_markdown,
    model_row,
    record_model,
)
from prag_assets.assets.lamp_data import lamp_samples
from prag_assets.assets.users import user_embeddings
from prag_assets.common import run_tasks
from prag_assets.mlflow_resource import MlflowResource
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, ModelsResource, PragSettingsResource
from prag_models.config import Settings
from prag_models.generation import lamp_prompt
from prag_models.methods.cfrag import pipeline
from prag_models.methods.profiles import ProfileIndex, Retrieved
from prag_models.prompts import prompt_document
from prag_models.registry import data_version
from prag_models.store import column_to_matrix, read_rows

FEEDBACK_TABLE = "feedback_labels"
FEEDBACK_KEY = ["task", "sample_id", "doc_id", "source_user_id", "generator_id", "prompt_version"]
FEEDBACK_COLUMNS = [*FEEDBACK_KEY, "output", "score"]
_COMMON = dict(group_name=GROUP, partitions_def=task_partitions, backfill_policy=single_run, pool=DUCKDB_POOL)


@dataclass
class FeedbackInputs:
    """A task's profile index, the selected training samples and their m·k candidates (§2.4–2.5)."""

    index: ProfileIndex
    prompt_docs: list[str]  # each index row as the prompt shows it
    samples: pd.DataFrame  # sample_id, user_id, input, query, gold, embedding
    candidates: dict[str, list[Retrieved]]


def load_feedback_inputs(con, task: str, settings: Settings) -> FeedbackInputs:
    """Selected train samples and their candidates: top-k docs by base dense cosine from each of the m similar users."""
    docs = con.execute(
        "SELECT p.doc_id, p.user_id, p.text, p.fields_json, e.embedding FROM profile_documents p "
        "JOIN document_embeddings e USING (task, user_id, doc_id) WHERE task = ? ORDER BY p.user_id, p.position",
        [task],
    ).df()
    index = ProfileIndex(
        docs["doc_id"].tolist(),
        docs["user_id"].tolist(),
        docs["text"].tolist(),
        column_to_matrix(docs["embedding"].tolist()),
    )
    prompt_docs = [
        prompt_document(task, t, json.loads(f)) for t, f in zip(docs["text"], docs["fields_json"], strict=True)
    ]
    train = con.execute(
        "SELECT s.sample_id, s.user_id, s.input, s.query, s.gold, q.embedding FROM lamp_samples s "
        "JOIN query_embeddings q USING (task, sample_id) WHERE task = ? AND s.split = 'train' ORDER BY s.sample_id",
        [task],
    ).df()
    c = settings.cfrag
    chosen = set(pipeline.select_feedback_samples(train["sample_id"].tolist(), c.max_feedback_samples, c.seed))
    samples = train[train["sample_id"].isin(chosen)].reset_index(drop=True)
    neighbours: dict[str, list[str]] = {}
    for user, nb in con.execute(
        "SELECT user_id, neighbour_id FROM cfrag_similar_users WHERE task = ? ORDER BY user_id, rank", [task]
    ).fetchall():
        neighbours.setdefault(user, []).append(nb)
    candidates = {
        s.sample_id: pipeline.per_user_top_k(
            index, neighbours.get(s.user_id, [s.user_id]), c.docs_per_user, pipeline.cosine_scorer(index, s.embedding)
        )
        for s in samples.itertuples(index=False)
    }
    return FeedbackInputs(index, prompt_docs, samples, candidates)


def existing_labels(con, task: str, generator_id: str, prompt_version: str) -> pd.DataFrame:
    """The feedback labels already stored for this task, generator and prompt version."""
    if not has_table(con, FEEDBACK_TABLE):
        return pd.DataFrame(columns=FEEDBACK_COLUMNS)
    return read_rows(
        con, FEEDBACK_TABLE, {"task": task, "generator_id": generator_id, "prompt_version": prompt_version}
    )


def append_labels(con, frame: pd.DataFrame) -> None:
    """Insert finished labels at once (creating the table), so an interrupted run keeps them."""
    con.register("_feedback_incoming", frame)
    try:
        if not has_table(con, FEEDBACK_TABLE):
            con.execute(f"CREATE TABLE {FEEDBACK_TABLE} AS SELECT * FROM _feedback_incoming")
        else:
            con.execute(f"INSERT INTO {FEEDBACK_TABLE} BY NAME SELECT * FROM _feedback_incoming")
    finally:
        con.unregister("_feedback_incoming")


@dg.asset(
    deps=[cfrag_similar_users, lamp_samples],
    kinds={"duckdb"},
    description="LLM feedback (§2.5): for each selected TRAIN sample and each of its m·k candidates, the output "
    "generated with a prompt holding only that doc, scored against the gold (accuracy, -|error|, ROUGE-1). Keyed by "
    "(task, sample, doc, generator, prompt version): existing labels are reused, each batch is written when done.",
    **_COMMON,
)
def feedback_labels(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
) -> dg.MaterializeResult:
    """Generate and score the missing feedback labels of each task."""
    settings = prag_settings.get()
    generator = models.generator()
    batch = max(1, settings.generator.batch_size)
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            inputs = load_feedback_inputs(con, task, settings)
            version = pipeline.feedback_prompt_version(task, settings)
            max_new = pipeline.feedback_max_new_tokens(task, settings)
            have = existing_labels(con, task, generator.model_id, version)
            done = set(zip(have["sample_id"], have["source_user_id"], have["doc_id"], strict=True))
            todo = [
                (s, c)
                for s in inputs.samples.itertuples(index=False)
                for c in inputs.candidates[s.sample_id]
                if (s.sample_id, c.source_user_id, c.doc_id) not in done
            ]
            total = sum(len(v) for v in inputs.candidates.values())
            context.log.info(f"{task} feedback: {total - len(todo)}/{total} labels exist, {len(todo)} to generate")
            started, generated = time.perf_counter(), 0
            for start in range(0, len(todo), batch):
                chunk = todo[start : start + batch]
                prompts = [
                    lamp_prompt(task, s.input, [inputs.prompt_docs[c.row]], generator, settings.prompt)
                    for s, c in chunk
                ]
                golds = [s.gold for s, _ in chunk]
                scores, outputs, new = pipeline.feedback_scores(task, generator, prompts, golds, settings, con, max_new)
                generated += new
                rows = [
                    (task, s.sample_id, c.doc_id, c.source_user_id, generator.model_id, version, out, score)
                    for (s, c), out, score in zip(chunk, outputs, scores, strict=True)
                ]
                append_labels(con, pd.DataFrame(rows, columns=FEEDBACK_COLUMNS))
                finished = start + len(chunk)
                rate = finished / max(time.perf_counter() - started, 1e-9)
                context.log.info(f"{task} feedback: {finished}/{len(todo)} new labels ({rate:.2f} labels/s)")
            seconds = time.perf_counter() - started
            labels = existing_labels(con, task, generator.model_id, version)
            labels = labels[labels["sample_id"].isin(set(inputs.samples["sample_id"]))]
            degenerate, n_samples = pipeline.degenerate_samples(labels)
            stats[task] = {
                "samples": len(inputs.samples),
                "candidates_per_sample": round(total / max(len(inputs.samples), 1), 2),
                "labels": total,
                "reused": total - len(todo),
                "labelled_now": len(todo),
                "llm_generations_now": generated,
                "seconds": round(seconds, 2),
                "labels_per_second": round(len(todo) / seconds, 2) if todo and seconds > 0 else None,
                "mean_score": round(float(labels["score"].mean()), 4) if len(labels) else None,
                "degenerate_share": round(degenerate / n_samples, 3) if n_samples else None,
                "prompt_version": version,
                "signal": settings.cfrag.feedback_signal,
            }
            context.log.info(f"{task} feedback: {stats[task]}")
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats), "generator": generator.model_id})


def load_training_set(
    con, task: str, settings: Settings, generator_id: str
) -> tuple[FeedbackInputs, pipeline.TrainingSet, pd.DataFrame, str]:
    """The labelled candidate lists of a task, the label rows used, and the encoder version behind e_u."""
    inputs = load_feedback_inputs(con, task, settings)
    labels = existing_labels(con, task, generator_id, pipeline.feedback_prompt_version(task, settings))
    labels = labels[labels["sample_id"].isin(set(inputs.samples["sample_id"]))]
    users = read_rows(con, "cfrag_user_embeddings", {"task": task})
    emb = dict(zip(users["user_id"], users["embedding"], strict=True))
    ts = pipeline.training_set(inputs.index, inputs.samples, inputs.candidates, labels, emb)
    if not ts.sample_ids:
        raise LookupError(f"{task}: no feedback labels for {generator_id}: materialize feedback_labels first")
    encoder = model_row(con, task, "user_encoder")
    used = labels[["sample_id", "source_user_id", "doc_id", "score"]].sort_values(
        ["sample_id", "source_user_id", "doc_id"]
    )
    return inputs, ts, used.reset_index(drop=True), f"{encoder['registered_name']}/{encoder['version']}"


def _projection_targets(con, task: str) -> tuple:
    """(e_u, z_u) of every user: the CFRAG user embeddings and the unit mean document embeddings (W's start)."""
    from prag_models.users.embeddings import normalize_rows

    rows = con.execute(
        "SELECT c.embedding AS e, u.embedding AS z FROM cfrag_user_embeddings c JOIN user_embeddings u "
        "USING (task, user_id) WHERE task = ? ORDER BY user_id",
        [task],
    ).fetchall()
    e = column_to_matrix([r[0] for r in rows])
    return e, normalize_rows(column_to_matrix([r[1] for r in rows]))


_TRAIN_PARAMS = (
    "alpha",
    "retriever_projection",
    "train_lr",
    "train_epochs",
    "train_batch_size",
    "validation_share",
    "early_stopping_patience",
    "feedback_signal",
    "seed",
    "top_m_users",
    "docs_per_user",
    "max_feedback_samples",
)


@dg.asset(
    deps=[feedback_labels, cfrag_user_embeddings, user_embeddings],
    kinds={"duckdb", "pytorch", "mlflow"},
    description="Personalized retriever S = (1-α)cos(q,d) + α cos(W e_u, d) (§2.4) distilled from the feedback "
    "labels with KL at T = 1 (§2.6); registered in MLflow.",
    **_COMMON,
)
def cfrag_retriever(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Train and register one retriever per task."""
    from prag_models.methods.cfrag.retriever import train_retriever

    settings = prag_settings.get()
    c = settings.cfrag
    generator_id = models.generator().model_id
    stats, curves = {}, {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            _, ts, used, encoder = load_training_set(con, task, settings, generator_id)
            started = time.perf_counter()
            with pipeline.single_thread():
                fitted = train_retriever(
                    ts.queries,
                    ts.docs,
                    ts.mask,
                    ts.user_emb,
                    ts.teacher,
                    c,
                    init_targets=_projection_targets(con, task),
                )
            model, curve = fitted.model, fitted.curve
            params = {k: getattr(c, k) for k in _TRAIN_PARAMS} | {
                "temperature": c.retriever_temperature,
                "task": task,
                "samples": len(ts.sample_ids),
                "generator": generator_id,
                "user_encoder": encoder,
            }
            stats[task] = record_model(
                con,
                mlflow,
                settings,
                task,
                "retriever",
                model,
                curve,
                params,
                data_version(used, encoder, generator_id),
                time.perf_counter() - started,
                fitted,
            )
            curves[task] = curve
            context.log.info(f"{task} retriever: {stats[task]}")
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "loss_curves": loss_curve_markdown(curves),
            "registered_versions": dg.MetadataValue.json({t: s["registered"] for t, s in stats.items()}),
        }
    )


@dg.asset(
    deps=[feedback_labels, cfrag_user_embeddings],
    kinds={"duckdb", "pytorch", "mlflow"},
    description="Personalized reranker MLP([CLS(q,d) ⊕ W2 e_u]) over a cross-encoder (§2.7) distilled from the "
    "feedback labels with KL at T = 0.1; plus the ablation reranker trained without e_u (§2.8). Both registered.",
    **_COMMON,
)
def cfrag_reranker(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    models: ModelsResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Train and register the reranker (and its no-e_u ablation) per task."""
    from prag_models.methods.cfrag.reranker import train_reranker

    settings = prag_settings.get()
    generator_id = models.generator().model_id
    stats, curves = {}, {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            inputs, ts, used, encoder = load_training_set(con, task, settings, generator_id)
            queries = dict(zip(inputs.samples["sample_id"], inputs.samples["query"], strict=True))
            samples = pipeline.rerank_samples(ts, queries, inputs.index.texts)
            for kind, use_eu in (("reranker", True), ("reranker_no_eu", False)):
                c = dataclasses.replace(settings.cfrag, reranker_use_user_embedding=use_eu)
                started = time.perf_counter()
                user_dim = int(ts.user_emb.shape[1])
                fitted = train_reranker(samples, c, model=pipeline.new_reranker(c, user_dim))
                model, curve = fitted.model, fitted.curve
                params = {k: getattr(c, k) for k in _TRAIN_PARAMS if k not in ("alpha", "retriever_projection")}
                params |= {
                    "temperature": c.reranker_temperature,
                    "reranker_model": c.reranker_model,
                    "max_length": c.reranker_max_length,
                    "layers": c.reranker_layers,
                    "use_user_embedding": use_eu,
                    "task": task,
                    "samples": len(samples),
                    "generator": generator_id,
                    "user_encoder": encoder,
                }
                version = data_version(used, encoder, generator_id, c.reranker_model)
                stats[f"{task}/{kind}"] = record_model(
                    con, mlflow, settings, task, kind, model, curve, params, version, time.perf_counter() - started,
                    fitted,
                )  # fmt: skip
                curves[f"{task}/{kind}"] = curve
                context.log.info(f"{task} {kind}: {stats[f'{task}/{kind}']}")
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "loss_curves": loss_curve_markdown(curves),
            "registered_versions": dg.MetadataValue.json({t: s["registered"] for t, s in stats.items()}),
        }
    )
