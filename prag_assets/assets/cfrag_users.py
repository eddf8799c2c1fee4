"""CFRAG stage 1 (docs/methods.md §2.1–2.3): contrastive user encoder, CFRAG user embeddings, top-m similar users.

Also the helpers every CFRAG training asset shares: save a trained model (safetensors), log and register it in
MLflow, and record it in table ``cfrag_models`` (task, kind, registered name and version, loss curve, probe scores).
"""

import time
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pandas as pd

from prag_assets.assets.embeddings import document_embeddings, query_embeddings
from prag_assets.common import preview, progress_logger, run_tasks
from prag_assets.mlflow_resource import MlflowResource
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_models.config import Settings
from prag_models.methods.cfrag.pipeline import (
    PROBE_DOCS,
    PROBE_ROWS,
    Probe,
    loss_trend,
    probe_scores,
    single_thread,
    user_histories,
)
from prag_models.registry import data_version, registered_name
from prag_models.store import column_to_matrix, read_rows, replace_rows

GROUP = "cfrag"
MODELS_TABLE = "cfrag_models"
_COMMON = dict(group_name=GROUP, partitions_def=task_partitions, backfill_policy=single_run, pool=DUCKDB_POOL)


def has_table(con, table: str) -> bool:
    """Whether a table exists; reads its result to the end (DuckDB refuses ``register`` while a result is open)."""
    rows = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'", [table]
    ).fetchall()
    return bool(rows and rows[0][0])


def model_dir(settings: Settings, task: str, kind: str) -> Path:
    """Local folder of a trained model: ``<home>/models/<task>/<kind>/``."""
    return settings.home_path / "models" / task / kind


def task_histories(con, task: str) -> tuple[list[str], dict[str, list[int]], np.ndarray, pd.DataFrame]:
    """Users of the task (with documents or samples), their histories (rows in profile order) and the doc matrix."""
    docs = read_rows(con, "document_embeddings", {"task": task}, order_by="user_id, position")
    histories = user_histories(docs["user_id"].tolist())
    sample_users = {
        u for (u,) in con.execute("SELECT DISTINCT user_id FROM lamp_samples WHERE task = ?", [task]).fetchall()
    }
    users = sorted(set(histories) | sample_users)
    return users, histories, column_to_matrix(docs["embedding"].tolist()), docs


def load_probe(con, task: str) -> Probe:
    """The load-back probe of a task: first users' histories, first dev queries, first documents, CFRAG e_u."""
    users, histories, matrix, _ = task_histories(con, task)
    dev = con.execute(
        "SELECT s.sample_id, s.user_id, s.query, q.embedding FROM lamp_samples s JOIN query_embeddings q "
        "USING (task, sample_id) WHERE task = ? AND s.split = 'dev' ORDER BY s.sample_id LIMIT ?",
        [task, PROBE_ROWS],
    ).df()
    texts = [
        t
        for (t,) in con.execute(
            "SELECT text FROM profile_documents WHERE task = ? ORDER BY user_id, position LIMIT ?", [task, PROBE_DOCS]
        ).fetchall()
    ]
    emb = {}
    if has_table(con, "cfrag_user_embeddings"):
        frame = read_rows(con, "cfrag_user_embeddings", {"task": task})
        emb = dict(zip(frame["user_id"], frame["embedding"], strict=True))
    user_emb = (
        np.stack([np.asarray(emb[u], dtype=np.float32) for u in dev["user_id"]])
        if emb and all(u in emb for u in dev["user_id"])
        else np.zeros((0, 0), dtype=np.float32)
    )
    return Probe(
        histories=[histories.get(u, []) for u in users[:PROBE_ROWS]],
        queries=column_to_matrix(dev["embedding"].tolist()),
        query_texts=dev["query"].tolist(),
        user_emb=user_emb,
        doc_vectors=matrix[:PROBE_DOCS],
        doc_texts=texts,
    )


def record_model(
    con,
    mlflow: MlflowResource,
    settings: Settings,
    task: str,
    kind: str,
    model: Any,
    curve: list[float],
    params: dict[str, Any],
    version_of_data: str,
    seconds: float,
    fitted: Any = None,
) -> dict[str, Any]:
    """Save a trained model, log + register it in MLflow (with the per-epoch validation record of ``fitted``, a
    FitResult, when given), write its ``cfrag_models`` row; returns a metadata entry."""
    from prag_models.methods.cfrag.serialization import save_model

    folder = save_model(model, model_dir(settings, task, kind))
    probe = probe_scores(kind, model, load_probe(con, task))
    start, end = loss_trend(curve)
    name = registered_name(kind, task)
    tags = {"task": task, "kind": kind}
    epochs = None
    summary: dict[str, Any] = {}
    if fitted is not None:
        summary = fitted.summary()
        tags |= {f"training.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in summary.items()}
        epochs = {
            "train_loss": [h.train_loss for h in fitted.history],
            "val_kl": [h.val_kl for h in fitted.history],
            "val_ndcg": [h.val_ndcg for h in fitted.history],
        }
    entry = mlflow.log_and_register(folder, name, params, curve, version_of_data, tags=tags, epoch_metrics=epochs)
    row = pd.DataFrame(
        [
            {
                "task": task,
                "kind": kind,
                "registered_name": name,
                "version": entry.version,
                "run_id": entry.run_id,
                "aliases": ",".join(entry.aliases),
                "data_version": version_of_data,
                "steps": len(curve),
                "loss_start": start,
                "loss_end": end,
                "loss_curve": [float(v) for v in curve],
                "probe_scores": [float(v) for v in probe],
                "train_seconds": round(seconds, 3),
                "local_path": str(folder),
                "trained_at": pd.Timestamp.now(tz="UTC").tz_localize(None),
            }
        ]
    )
    replace_rows(con, MODELS_TABLE, row, {"task": task, "kind": kind})
    return {
        "registered": f"{name}/{entry.version}",
        "aliases": list(entry.aliases),
        "data_version": version_of_data,
        "steps": len(curve),
        "loss_first": round(curve[0], 5) if curve else None,
        "loss_last": round(curve[-1], 5) if curve else None,
        "loss_start_mean": round(start, 5),
        "loss_end_mean": round(end, 5),
        "train_seconds": round(seconds, 2),
        **summary,
    }


def model_row(con, task: str, kind: str) -> dict[str, Any]:
    """The ``cfrag_models`` row of the model a training asset registered last for the task."""
    if not has_table(con, MODELS_TABLE):
        raise LookupError(f"table {MODELS_TABLE} does not exist: materialize the CFRAG training assets first")
    frame = read_rows(con, MODELS_TABLE, {"task": task, "kind": kind})
    if frame.empty:
        raise LookupError(f"no {kind} registered for {task}: materialize its training asset first")
    return frame.iloc[0].to_dict()


def load_registered_model(con, mlflow: MlflowResource, task: str, kind: str) -> tuple[Any, dict[str, Any]]:
    """Load from MLflow the exact version the training asset registered (version number from ``cfrag_models``)."""
    row = model_row(con, task, kind)
    model, _ = mlflow.load(row["registered_name"], version=int(row["version"]))
    return model, row


def loss_curve_markdown(curves: dict[str, list[float]], points: int = 12) -> dg.MetadataValue:
    """A compact markdown table of loss curves (about ``points`` evenly spaced steps per task)."""
    lines = ["| task | step: loss |", "|---|---|"]
    for task, curve in curves.items():
        steps = sorted({int(i) for i in np.linspace(0, len(curve) - 1, min(points, len(curve)))}) if curve else []
        lines.append(f"| {task} | " + ", ".join(f"{s}: {curve[s]:.4f}" for s in steps) + " |")
    return dg.MetadataValue.md("\n".join(lines))


@dg.asset(
    deps=[document_embeddings, query_embeddings],  # query vectors: the load-back probe
    kinds={"duckdb", "pytorch", "mlflow"},
    description="CFRAG user encoder (§2.1–2.2): doc embeddings + positions + one Transformer layer, trained with "
    "InfoNCE on two augmented views of every user's history; saved as safetensors and registered in MLflow.",
    **_COMMON,
)
def cfrag_user_encoder(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Train and register one user encoder per task on the histories of all its users."""
    from prag_models.methods.cfrag.user_encoder import train_user_encoder

    settings = prag_settings.get()
    c = settings.cfrag
    stats, curves = {}, {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            users, histories, matrix, docs = task_histories(con, task)
            started = time.perf_counter()
            with single_thread():
                model, curve = train_user_encoder(
                    [histories[u] for u in sorted(histories)],
                    matrix,
                    c,
                    progress_logger(context, f"{task} user encoder"),
                )
            seconds = time.perf_counter() - started
            params = {
                k: getattr(c, k)
                for k in (
                    "max_history",
                    "heads",
                    "dropout",
                    "finetune_doc_embeddings",
                    "crop_ratio",
                    "mask_ratio",
                    "reorder_ratio",
                    "tau",
                    "lr",
                    "weight_decay",
                    "batch_size",
                    "epochs",
                    "seed",
                )
            }
            params |= {"task": task, "users": len(histories), "documents": len(docs)}
            version = data_version(docs[["user_id", "doc_id", "position", "model_id", "content_hash"]])
            stats[task] = record_model(
                con, mlflow, settings, task, "user_encoder", model, curve, params, version, seconds
            )
            curves[task] = curve
            context.log.info(f"{task} user encoder: {stats[task]}")
    return dg.MaterializeResult(
        metadata={
            "per_task": dg.MetadataValue.json(stats),
            "loss_curves": loss_curve_markdown(curves),
            "registered_versions": dg.MetadataValue.json({t: s["registered"] for t, s in stats.items()}),
        }
    )


@dg.asset(
    deps=[cfrag_user_encoder],
    kinds={"duckdb", "pytorch", "mlflow"},
    description="e_u of every user of the task from the REGISTERED user encoder version (loaded from MLflow).",
    **_COMMON,
)
def cfrag_user_embeddings(
    context: dg.AssetExecutionContext,
    prag_settings: PragSettingsResource,
    duckdb: DuckDBResource,
    mlflow: MlflowResource,
) -> dg.MaterializeResult:
    """Encode every user's history with the registered encoder."""
    from prag_models.methods.cfrag.user_encoder import encode_users

    settings = prag_settings.get()
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            users, histories, _, _ = task_histories(con, task)
            model, row = load_registered_model(con, mlflow, task, "user_encoder")
            with single_thread():
                vectors = encode_users(model, [histories.get(u, []) for u in users])
            frame = pd.DataFrame({"task": task, "user_id": users, "embedding": list(vectors)})
            replace_rows(con, "cfrag_user_embeddings", frame, {"task": task})
            stats[task] = {
                "users": len(users),
                "without_history": sum(1 for u in users if u not in histories),
                "encoder": f"{row['registered_name']}/{row['version']}",
            }
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats)})


@dg.asset(
    deps=[cfrag_user_embeddings],
    kinds={"duckdb"},
    description="Top-m users by cosine of CFRAG user embeddings (FAISS), the user itself first when "
    "cfrag.include_self (§2.3; code: self + m-1 others).",
    **_COMMON,
)
def cfrag_similar_users(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Retrieve the m most similar users of every user."""
    from prag_models.methods.cfrag.user_encoder import top_m_similar_users

    settings = prag_settings.get()
    c = settings.cfrag
    stats = {}
    frame = pd.DataFrame()
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            users = read_rows(con, "cfrag_user_embeddings", {"task": task}, order_by="user_id")
            ids = users["user_id"].tolist()
            found, scores = top_m_similar_users(
                column_to_matrix(users["embedding"].tolist()), c.top_m_users, c.include_self
            )
            rows = [
                (task, ids[i], ids[int(j)], rank, float(s))
                for i in range(len(ids))
                for rank, (j, s) in enumerate(zip(found[i], scores[i], strict=True), 1)
            ]
            frame = pd.DataFrame(rows, columns=["task", "user_id", "neighbour_id", "rank", "similarity"])
            replace_rows(con, "cfrag_similar_users", frame, {"task": task})
            stats[task] = {"users": len(ids), "pairs": len(frame), "m": int(found.shape[1])}
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats), "preview": preview(frame)})
