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
    plan = [(u, 3) for u in grown] + [(u, 6) for u in moved] + [(u, int(rng.integers(*FULL_DOCS))) for u in arrivals]
    for u, n in plan:
        day = WEEK_START + np.timedelta64(int(rng.integers(0, 5)), "D")
        for t in rng.choice(week.covered[u], size=n):
            fields, _ = _doc_fields(task, rng, week, u, str(t))
            records.append({"user_id": f"u{u:04d}", "id": str(base + len(records) + 1), "date": str(day), **fields})
    changed = {"grown": [f"u{u:04d}" for u in grown], "moved": [f"u{u:04d}" for u in moved],
               "new": [f"u{u:04d}" for u in arrivals], "documents": len(records)}  # fmt: skip
    return records, changed


def write_second_week(folder: Path, task: str, settings: Any) -> tuple[Path, dict[str, Any]]:
    """Write a task's second week for the configured demo as ``folder/<task>-week2.json``; (path, what changed)."""
    d = settings.data
    records, changed = second_week(task, d.demo_users, d.demo_communities, d.demo_dev_samples, d.demo_seed,
                                   d.demo_family)  # fmt: skip
    path = Path(folder) / f"{task_from_name(task)}-week2.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path, changed
