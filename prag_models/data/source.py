"""Where a task's LaMP files come from (embedded demo or a LaMP folder) and their tabular form."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.lamp import LampSample, load_lamp_task
from prag_models.data.set_aside import SetAside
from prag_models.storage.hashing import content_hash


def demo_root(settings: Settings) -> Path:
    """Folder of the generated demo for the current demo parameters (written on first use, deterministic)."""
    from prag_models.data.demo import GENERATOR, write_demo

    d = settings.data
    params = {"users": d.demo_users, "communities": d.demo_communities, "dev": d.demo_dev_samples, "seed": d.demo_seed}
    params["generator"] = GENERATOR  # a new generative model never reuses files written by an older one
    if d.demo_family != "communities":  # the default family keeps the folders written before families existed
        params["family"] = d.demo_family
    key = hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    root = settings.home_path / "demo_data" / key
    if not (root / "demo_manifest.json").exists():
        write_demo(
            root,
            users=d.demo_users,
            communities=d.demo_communities,
            dev_samples=d.demo_dev_samples,
            seed=d.demo_seed,
            family=d.demo_family,
        )
    return root


def lamp_root(settings: Settings) -> Path:
    """The folder holding LaMP_X[_time]/{train,dev} files for the configured source."""
    if settings.data.source == "demo":
        return demo_root(settings)
    root = Path(settings.data.lamp_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"data.lamp_dir {str(root)!r} is not a folder")
    return root


def load_task_samples(
    settings: Settings, task: str, set_aside: list[SetAside] | None = None
) -> dict[str, list[LampSample]]:
    """Train and dev samples of one task from the configured source; with ``data.malformed = "set_aside"`` the
    malformed records are left out, and recorded in ``set_aside`` when it is given."""
    split_kind = "time" if settings.data.source == "demo" else settings.data.split_kind
    rows = (set_aside if set_aside is not None else []) if settings.data.malformed == "set_aside" else None
    splits = load_lamp_task(lamp_root(settings), task, ("train", "dev"), split_kind, settings.data.undated, rows)
    if settings.data.max_eval_samples and "dev" in splits:
        splits["dev"] = splits["dev"][: settings.data.max_eval_samples]
    return splits


def without_users(
    splits: dict[str, list[LampSample]], relevance: pd.DataFrame, communities: pd.DataFrame, users: set[str]
) -> tuple[dict[str, list[LampSample]], pd.DataFrame, pd.DataFrame, int]:
    """The loaded splits and the demo's truth without the given users (erased ones: docs/privacy.md), and how many
    users went: their samples, their profiles' documents among the relevance labels, their community rows."""
    if not users:
        return splits, relevance, communities, 0
    gone = {s.user_id for split in splits.values() for s in split if s.user_id in users}
    kept = {name: [s for s in split if s.user_id not in users] for name, split in splits.items()}
    samples = {s.sample_id for split in kept.values() for s in split}
    docs = {d.doc_id for split in kept.values() for s in split for d in s.profile}
    relevance = relevance[relevance["sample_id"].isin(samples) & relevance["doc_id"].isin(docs)]
    communities = communities[~communities["user_id"].isin(users)]
    return kept, relevance, communities, len(gone)


def samples_frame(task: str, splits: dict[str, list[LampSample]]) -> pd.DataFrame:
    """One row per sample: task, split, sample_id, user_id, input, query, gold."""
    rows = [
        {
            "task": task,
            "split": split,
            "sample_id": s.sample_id,
            "user_id": s.user_id,
            "input": s.input,
            "query": s.query,
            "gold": s.gold,
        }
        for split, samples in splits.items()
        for s in samples
    ]
    return pd.DataFrame(rows, columns=["task", "split", "sample_id", "user_id", "input", "query", "gold"])


def sample_profiles_frame(task: str, splits: dict[str, list[LampSample]]) -> pd.DataFrame:
    """One row per (sample, profile document) exactly as the files list them, in profile (date) order."""
    rows = [
        {
            "task": task,
            "sample_id": s.sample_id,
            "user_id": s.user_id,
            "doc_id": doc.doc_id,
            "date": doc.date,
            "position": position,
            "text": doc.text,
            "fields_json": json.dumps(doc.fields, ensure_ascii=False, sort_keys=True),
        }
        for samples in splits.values()
        for s in samples
        for position, doc in enumerate(s.profile)
    ]
    return pd.DataFrame(
        rows, columns=["task", "sample_id", "user_id", "doc_id", "date", "position", "text", "fields_json"]
    )


def user_profiles(sample_profiles: pd.DataFrame) -> pd.DataFrame:
    """One row per (user, document): a user's samples share one history; the longest listing gives the order."""
    if sample_profiles.empty:
        return sample_profiles.assign(content_hash=pd.Series(dtype=str)).drop(columns=["sample_id"])
    sizes = sample_profiles.groupby(["user_id", "sample_id"]).size().rename("n").reset_index()
    longest = sizes.sort_values(["user_id", "n", "sample_id"], ascending=[True, False, True]).drop_duplicates("user_id")
    frame = sample_profiles.merge(longest[["user_id", "sample_id"]], on=["user_id", "sample_id"])
    extra = sample_profiles.drop_duplicates(["user_id", "doc_id"]).merge(
        frame[["user_id", "doc_id"]], on=["user_id", "doc_id"], how="left", indicator=True
    )
    extra = extra[extra["_merge"] == "left_only"].drop(columns="_merge")
    extra["position"] = extra["position"] + 1_000_000  # documents only other samples list go last
    frame = pd.concat([frame, extra], ignore_index=True).drop(columns=["sample_id"])
    frame = frame.sort_values(["user_id", "position"], kind="stable").reset_index(drop=True)
    frame["position"] = frame.groupby("user_id").cumcount()
    frame["content_hash"] = [content_hash(t) for t in frame["text"]]
    return frame


def demo_truth_frames(settings: Settings, task: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The demo's planted truth of a task: relevant documents per sample, and each user's community.

    Both frames are empty when the source is not the demo (LaMP files carry no relevance labels).
    """
    relevance = pd.DataFrame(columns=["task", "sample_id", "doc_id"])
    communities = pd.DataFrame(columns=["task", "user_id", "community"])
    if settings.data.source != "demo":
        return relevance, communities
    manifest = json.loads((demo_root(settings) / "demo_manifest.json").read_text(encoding="utf-8"))
    entry = manifest["tasks"].get(task, {})
    relevance = pd.DataFrame(
        [(task, sid, d) for sid, info in entry.get("sample_info", {}).items() for d in info.get("relevant_docs", [])],
        columns=["task", "sample_id", "doc_id"],
    )
    communities = pd.DataFrame(
        [(task, u, int(c)) for u, c in entry.get("community_of_user", {}).items()],
        columns=["task", "user_id", "community"],
    )
    return relevance, communities


#: Seed of the order the LLM-evaluation samples are taken in.
LLM_EVAL_SEED = 0


def llm_eval_order(sample_ids: Iterable[str]) -> list[str]:
    """Every sample id in the fixed seeded order the LLM work takes samples in (the first N are the LLM-evaluation
    samples; the LLM utility's pilot and test samples follow the same order)."""
    import numpy as np

    ids = sorted(str(s) for s in sample_ids)
    return [ids[int(i)] for i in np.random.default_rng(LLM_EVAL_SEED).permutation(len(ids))]


def llm_eval_sample_ids(sample_ids: Iterable[str], settings: Settings) -> list[str]:
    """The dev samples the LLM evaluation uses: the first data.llm_eval_samples of a fixed seeded order of the ids
    (0 = all), sorted, as run.generation_samples lets this run take them (0 = none: deferred); a larger count only
    adds samples."""
    n, cut = settings.data.llm_eval_samples, settings.run.generation_samples
    if cut == 0:
        return []
    if cut > 0:
        n = cut if n <= 0 else min(n, cut)
    order = llm_eval_order(sample_ids)
    return sorted(order if n <= 0 else order[:n])
