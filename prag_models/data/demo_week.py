"""A second week of the embedded demo's histories (the lifecycle round, docs/how-to/promotion.md): new profile
documents in the ingestion format of ``prag_models/data/history.py``, written by the demo's own generator
(``demo._doc_fields``) over the same planted world, deterministic for a seed.

Three kinds of change, on disjoint users: existing users write more on their own topics (``grow_share`` of them,
thin profiles first: the week they stop being thin), some users' taste moves (``move_share``: they join another
community and write on its topics with its labels), and ``new_users`` users arrive with a full first history. Document
ids continue after week one's (``<task number> * 100000 + 90000 + i``), dates after the newest week-one date.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from prag_models.data.demo import FULL_DOCS, _doc_fields
from prag_models.data.demo_world import build_world
from prag_models.data.tasks import task_from_name

#: Salt of the second week's random stream (a week-one seed gives a different, fixed week two).
WEEK_SALT = 2
WEEK_START = np.datetime64("2024-01-01")  # after every week-one date (2012 + at most 3000 + 14·59 days)


def second_week(
    task: str, users: int, communities: int, dev_samples: int, seed: int, family: str = "communities",
    grow_share: float = 0.3, move_share: float = 0.1, new_users: int = 6,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """(records, what changed) of one task's second week: records ``{user_id, id, date, <task fields>}``."""
    task = task_from_name(task)
    world = build_world(family, users, communities, dev_samples, None, seed)
    rng = np.random.default_rng([seed, WEEK_SALT, int(task[5:])])
    order = [int(u) for u in rng.permutation(users)]
    thin_first = sorted(order, key=lambda u: not world.thin[u])  # stable: random order among thin, then full
    n_move, n_grow = round(move_share * users), round(grow_share * users)
    moved = order[:n_move]
    grown = [u for u in thin_first if u not in set(moved)][:n_grow]
    # the moved users take another community's taste, style and topics; new users get a community at random
    community, style, group, covered = list(world.community), list(world.style), list(world.group), list(world.covered)
    for u in moved:
        other = int(rng.choice([c for c in sorted(set(world.community)) if c != world.community[u]]))
        donor = world.community.index(other)
        community[u], style[u], group[u] = other, world.style[donor], world.group[donor]
        covered[u] = list(world.topics[world.group[donor]][:2])
    arrivals = list(range(users, users + new_users))
    for _ in arrivals:
        donor = int(rng.integers(0, users))
        community.append(world.community[donor])
        style.append(world.style[donor])
        group.append(world.group[donor])
        covered.append(list(world.topics[world.group[donor]][:3]))
    week = replace(world, community=community, style=style, group=group, covered=covered)
    base, records = int(task[5:]) * 100_000 + 90_000, []
    truth: dict[tuple[int, str], list[str]] = {}
    plan = [(u, 3) for u in grown] + [(u, 6) for u in moved] + [(u, int(rng.integers(*FULL_DOCS))) for u in arrivals]
    for u, n in plan:
        day = WEEK_START + np.timedelta64(int(rng.integers(0, 5)), "D")
        for t in rng.choice(week.covered[u], size=n):
            fields, noisy = _doc_fields(task, rng, week, u, str(t))
            doc_id = str(base + len(records) + 1)
            records.append({"user_id": f"u{u:04d}", "id": doc_id, "date": str(day), **fields})
            if not noisy:  # the planted truth: relevant to the samples of its author's community and topic
                truth.setdefault((week.community[u], str(t)), []).append(doc_id)
    changed = {"grown": [f"u{u:04d}" for u in grown], "moved": [f"u{u:04d}" for u in moved],
               "new": [f"u{u:04d}" for u in arrivals], "documents": len(records), "truth": truth}  # fmt: skip
    return records, changed


def write_second_week(folder: Path, task: str, settings: Any) -> tuple[Path, dict[str, Any]]:
    """Write a task's second week for the configured demo as ``folder/<task>-week2.json``; (path, what changed). The
    demo's planted truth grows with it: each new document is relevant to the samples of its author's (week-two)
    community and topic, as week one's are (``demo._task_data``); ``changed["relevance"]`` holds those
    (sample_id, doc_id) pairs, and the demo's manifest lists them, so a later load reads the same truth."""
    d = settings.data
    records, changed = second_week(task, d.demo_users, d.demo_communities, d.demo_dev_samples, d.demo_seed,
                                   d.demo_family)  # fmt: skip
    path = Path(folder) / f"{task_from_name(task)}-week2.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    changed["relevance"] = extend_manifest(settings, task_from_name(task), changed.pop("truth"))
    return path, changed


def extend_manifest(settings: Any, task: str, truth: dict[tuple[int, str], list[str]]) -> list[tuple[str, str]]:
    """Add the second week's relevant documents to the demo manifest's samples (once: ids already listed are kept);
    the (sample_id, doc_id) pairs added."""
    from prag_models.data.source import demo_root

    path = demo_root(settings) / "demo_manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    added = []
    for sample_id, info in manifest["tasks"][task]["sample_info"].items():
        listed = info.setdefault("relevant_docs", [])
        for doc_id in truth.get((int(info["community"]), str(info["topic"])), []):
            if doc_id not in listed:
                listed.append(doc_id)
                added.append((sample_id, doc_id))
    path.write_text(json.dumps(manifest, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return added


def add_relevance(con: Any, task: str, pairs: list[tuple[str, str]]) -> int:
    """Append (sample_id, doc_id) pairs to the task's relevance_labels (the evaluation reads the truth there)."""
    import pandas as pd

    from prag_models.storage.store import table_exists

    if not pairs or not table_exists(con, "relevance_labels"):
        return 0
    frame = pd.DataFrame([(task, s, d) for s, d in pairs], columns=["task", "sample_id", "doc_id"])
    con.register("_week2_relevance", frame)
    try:
        added = con.execute(
            "INSERT INTO relevance_labels BY NAME SELECT * FROM _week2_relevance w WHERE NOT EXISTS (SELECT 1 FROM "
            "relevance_labels r WHERE r.task = w.task AND r.sample_id = w.sample_id AND r.doc_id = w.doc_id)"
        ).fetchone()
    finally:
        con.unregister("_week2_relevance")
    return int(added[0]) if added else 0
