"""Stage 1: raw LaMP samples (questions + golds) and the deduplicated profile documents."""

import dagster as dg

from prag_assets.common import preview, run_tasks, table_metadata
from prag_assets.partitions import DUCKDB_POOL, single_run, task_partitions
from prag_assets.resources import DuckDBResource, PragSettingsResource
from prag_assets.task_table import CODE_VERSION
from prag_models.data.lamp import undated_documents
from prag_models.data.sharing import SHARING_TABLE, VISIBILITY_TABLE, task_sharing
from prag_models.data.source import (
    demo_truth_frames,
    load_task_samples,
    sample_profiles_frame,
    samples_frame,
    user_profiles,
    without_users,
)
from prag_models.privacy.forget import erased_users
from prag_models.storage.store import read_rows, replace_many, replace_rows

GROUP = "lamp_data"


@dg.asset(
    group_name=GROUP,
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSION,
    description="LaMP questions and golds of the train and dev splits (demo or LaMP folder), validated on load "
    "(every task's files before anything is written), each user's sharing consent and the documents' visibility "
    "(tables user_sharing, document_visibility; docs/privacy.md); for the demo also its planted truth (tables "
    "relevance_labels, planted_communities). Users erased by `prag forget` are skipped (erasure_audit). Metadata "
    "counts the undated profile documents and the skipped erased users per task.",
)
def lamp_samples(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Load and validate the tasks' LaMP files; write lamp_samples, lamp_sample_profiles and the demo's truth."""
    settings = prag_settings.get()
    tasks = run_tasks(context, settings)
    with duckdb.connect() as con:
        erased = {task: erased_users(con, task) for task in tasks}
    loaded = {task: load_task_samples(settings, task) for task in tasks}
    counts: dict[str, int] = {}
    skipped: dict[str, int] = {}
    undated = {
        task: undated_documents(s for samples in splits.values() for s in samples) for task, splits in loaded.items()
    }
    writes = []  # every table of every task, built (and validated) before anything is written
    for task in list(loaded):
        relevance, communities = demo_truth_frames(settings, task)
        splits, relevance, communities, skipped[task] = without_users(loaded[task], relevance, communities,
                                                                      erased[task])  # fmt: skip
        loaded[task] = splits
        sharing, visibility = task_sharing(settings, task, splits)  # consent and visibility (docs/privacy.md)
        where = {"task": task}
        writes += [
            (SHARING_TABLE, sharing, where),
            (VISIBILITY_TABLE, visibility, where),
            ("lamp_samples", samples_frame(task, splits), where),
            ("lamp_sample_profiles", sample_profiles_frame(task, splits), where),
            ("relevance_labels", relevance, where),
            ("planted_communities", communities, where),
        ]
        counts.update({f"{task}/{split}": len(samples) for split, samples in splits.items()})
    with duckdb.connect() as con:
        replace_many(con, writes)  # one transaction: all of it lands, or none
        table = table_metadata(con, "lamp_samples", list(loaded))
    context.log.info(f"loaded samples: {counts}")
    last = samples_frame(*next(reversed(loaded.items()))) if loaded else None
    return dg.MaterializeResult(
        metadata={
            "samples": dg.MetadataValue.json(counts),
            "source": settings.data.source,
            "undated_documents": dg.MetadataValue.json(undated),
            "undated_policy": settings.data.undated,
            "erased_users_skipped": dg.MetadataValue.json(skipped),
            "preview": preview(last) if last is not None else "_no task_",
            **table,
        }
    )


@dg.asset(
    group_name=GROUP,
    deps=[lamp_samples],
    partitions_def=task_partitions,
    backfill_policy=single_run,
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    code_version=CODE_VERSION,
    description="One row per (user, profile document) in date order, with the text as the seeds render it and a "
    "content hash (the embedding cache key).",
)
def profile_documents(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Publish the users' profile documents of each task."""
    settings = prag_settings.get()
    stats = {}
    with duckdb.connect() as con:
        for task in run_tasks(context, settings):
            frame = user_profiles(read_rows(con, "lamp_sample_profiles", {"task": task}))
            replace_rows(con, "profile_documents", frame, {"task": task})
            stats[task] = {"documents": len(frame), "users": int(frame["user_id"].nunique())}
        table = table_metadata(con, "profile_documents", list(stats))
    return dg.MaterializeResult(metadata={"per_task": dg.MetadataValue.json(stats), **table})
