"""Stage 1: raw LaMP samples (questions + golds) and the deduplicated profile documents."""

import dagster as dg

from prag_assets.builders.task_table import stage_asset, task_asset
from prag_assets.execution import TaskStep, run_tasks
from prag_assets.metadata import report_partitions
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.data.history_documents import latest_history, with_history
from prag_models.data.lamp import undated_documents
from prag_models.data.set_aside import SET_ASIDE_TABLE, SetAside, set_aside_frame
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


@task_asset(
    GROUP,
    description="LaMP questions and golds of the train and dev splits (demo or LaMP folder), validated on load "
    "(every task's files before anything is written), each user's sharing consent and the documents' visibility "
    "(tables user_sharing, document_visibility; docs/privacy.md); for the demo also its planted truth (tables "
    "relevance_labels, planted_communities). Users erased by `prag forget` are skipped (erasure_audit). A malformed "
    "record stops the run unless data.malformed = \"set_aside\": then it is left out, one row per record in table "
    "set_aside_records (file, record, field, reason). Metadata counts, on each task partition, the samples per split, "
    "the undated profile documents, the records set aside, the skipped erased users and the user ids derived from the "
    "profile (original split only; a time split must name every question's user).",
)
def lamp_samples(
    context: dg.AssetExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
) -> dg.MaterializeResult:
    """Load and validate the tasks' LaMP files; write lamp_samples, lamp_sample_profiles and the demo's truth."""
    settings = prag_settings.get()
    tasks = run_tasks(context, settings)
    with duckdb.connect() as con:
        erased = {task: erased_users(con, task) for task in tasks}
    set_aside: dict[str, list[SetAside]] = {task: [] for task in tasks}  # data.malformed = "set_aside" fills them
    loaded = {task: load_task_samples(settings, task, set_aside[task]) for task in tasks}
    counts: dict[str, dict[str, int]] = {}
    set_aside_counts: dict[str, int] = {}
    skipped: dict[str, int] = {}
    undated = {
        task: undated_documents(s for samples in splits.values() for s in samples) for task, splits in loaded.items()
    }
    derived = {task: sum(s.derived_user_id for samples in splits.values() for s in samples)
               for task, splits in loaded.items()}  # fmt: skip
    writes = []  # every table of every task, built (and validated) before anything is written
    for task in list(loaded):
        relevance, communities = demo_truth_frames(settings, task)
        splits, relevance, communities, skipped[task] = without_users(loaded[task], relevance, communities,
                                                                      erased[task])  # fmt: skip
        loaded[task] = splits
        sharing, visibility = task_sharing(settings, task, splits)  # consent and visibility (docs/privacy.md)
        where = {"task": task}
        aside = set_aside_frame(r for r in set_aside[task] if r.user_id not in erased[task])
        writes += [
            (SET_ASIDE_TABLE, aside, where),
            (SHARING_TABLE, sharing, where),
            (VISIBILITY_TABLE, visibility, where),
            ("lamp_samples", samples_frame(task, splits), where),
            ("lamp_sample_profiles", sample_profiles_frame(task, splits), where),
            ("relevance_labels", relevance, where),
            ("planted_communities", communities, where),
        ]
        counts[task] = {split: len(samples) for split, samples in splits.items()}
        set_aside_counts[task] = len(aside)  # counts only: no row is previewed in Dagster's records (docs/privacy.md)
    stats = {task: {"samples": counts[task], "undated_documents": undated[task], "set_aside_records":
                    set_aside_counts[task], "erased_users_skipped": skipped[task], "derived_user_ids": derived[task]}
             for task in loaded}  # fmt: skip
    with duckdb.connect() as con:
        replace_many(con, writes)  # one transaction: all of it lands, or none
        report_partitions(context, con, "lamp_samples", stats)
    context.log.info(f"loaded samples: {counts}")
    if any(set_aside_counts.values()):
        context.log.warning(f"malformed records set aside (table {SET_ASIDE_TABLE}): {set_aside_counts}")
    return dg.MaterializeResult(metadata={"source": settings.data.source, "undated_policy": settings.data.undated,
                                          "malformed_policy": settings.data.malformed})  # fmt: skip


@stage_asset(
    GROUP, table="profile_documents",
    deps=[lamp_samples, dg.AssetKey("profile_history")],  # by key: assets/history.py imports the user assets
    description="One row per (user, profile document) in date order, with the text as the seeds render it and a "
    "content hash (the embedding cache key): the LaMP files' documents and the latest version of each history "
    "document (profile_history: `prag ingest`, the drop folder), merged as the incremental update merges them "
    "(docs/methods.md §3.7), so every retrieval of a run reads one document set and nothing it included stays "
    "pending. Metadata counts the history documents included, their users and the last history seq.",
)
def profile_documents(step: TaskStep) -> dict:
    """Publish one task's profile documents: LaMP ∪ the latest history versions."""
    lamp = user_profiles(read_rows(step.con, "lamp_sample_profiles", {"task": step.task}))
    frame, included = with_history(step.task, lamp, latest_history(step.con, step.task))
    replace_rows(step.con, "profile_documents", frame, {"task": step.task})
    return {"documents": len(frame), "users": int(frame["user_id"].nunique()), **included}
