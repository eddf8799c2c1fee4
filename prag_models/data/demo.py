"""Embedded demo: deterministic LaMP-format files where collaboration matters (details: docs/demo_data.md).

``write_demo`` writes ``root/LaMP_X_time/{train,dev}/{split}_{questions,outputs}.json`` and ``demo_manifest.json``
(the planted truth, including which documents are relevant to each sample) with ``numpy.random.default_rng`` only.
Planted, for 2–8 communities of users ``u0000``…: 2·C topics on a ring, each community interested in 4 of them and
every topic shared by two communities; the community, not the topic, decides the label (a LaMP-2 tag, a LaMP-3
rating, the key words of a headline/title/tweet), so another community's documents on the same topic carry a
conflicting label. Half of the users have thin profiles (2–4 documents on one topic). Queries describe an item in
neutral words (who asks is not in the text); in ⌊n/2⌋ of a split's n samples the topic is absent from the user's own
profile. A document is relevant to a sample when its author belongs to the asker's community, it is about the
sample's topic and its label is not a noise flip. That is the default family ("communities"); ``family`` picks
another kind of world (prag_models/data/demo_world.py: "split_taste", "no_community", "alike_communities",
"tagging").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prag_models.data.demo_vocab import (
    FILLER,
    HEADLINES,
    NEUTRAL_OPENERS,
    NEUTRAL_TITLES,
    NEUTRAL_TWEETS,
    STYLES,
    TITLES,
    TOPICS,
    TWEETS,
)
from prag_models.data.demo_world import DEFAULT_FAMILY, FAMILIES, RATINGS, World, build_world, manifest_world, one, pick
from prag_models.data.tasks import INPUT_TEMPLATES, LAMP2_TAGS, TASKS, task_from_name

GENERATOR = "prag demo v2"
MAX_COMMUNITIES = len(STYLES)
LABEL_NOISE = 0.1
THIN_DOCS, FULL_DOCS = (2, 4), (8, 14)
_pick, _one = pick, one


def _passage(rng: np.random.Generator, c: int | None, t: str, clauses: int = 4) -> str:
    """A 30–40 word text about topic t, in community c's style (None: neutral item description)."""
    words = _pick(rng, TOPICS[t], 2 * clauses)
    parts = [f"{_one(rng, FILLER)} {words[2 * i]} and {words[2 * i + 1]}" for i in range(clauses)]
    if c is None:
        return f"{_one(rng, NEUTRAL_OPENERS)}: " + ", ".join(parts) + "."
    opener, closer = STYLES[c]
    return f"{opener}, " + ", ".join(parts) + f"; {closer}."


def _pattern(rng: np.random.Generator, world: World, patterns: tuple[str, ...], c: int, t: str) -> str:
    """Community c's pattern filled with the two (c,t) key words and one more word of topic t."""
    a, b = world.keys[(c, t)]
    extra = _one(rng, [w for w in TOPICS[t] if w not in (a, b)])
    return patterns[world.pattern[c]].format(a=a, b=b, c=extra)


def _other(rng: np.random.Generator, value: str, choices: tuple[str, ...]) -> str:
    """A random choice different from value."""
    return str(_one(rng, [x for x in choices if x != value]))


def _noisy(rng: np.random.Generator, value: str, choices: tuple[str, ...]) -> tuple[str, bool]:
    """(value, False), or with probability LABEL_NOISE (another of the choices, True)."""
    return (_other(rng, value, choices), True) if rng.random() < LABEL_NOISE else (value, False)


def _doc_fields(task: str, rng: np.random.Generator, world: World, u: int, t: str) -> tuple[dict[str, str], bool]:
    """The task fields of one profile document of user u about topic t, and whether noise hit.

    The label (tag, score, title/headline/tweet pattern and key words) follows u's taste (world.community), the
    passage u's wording style (world.style); in the communities family both are u's community.
    """
    c, s = world.community[u], world.style[u]
    if task == "LaMP-1":
        a, b, x = _pick(rng, TOPICS[t], 3)
        return {"title": TITLES[world.pattern[c]].format(a=a, b=b, c=x), "abstract": _passage(rng, s, t)}, False
    if task == "LaMP-2":
        tag, flipped = _noisy(rng, world.tag[(c, t)], LAMP2_TAGS)
        return {"description": _passage(rng, s, t), "tag": tag}, flipped
    if task == "LaMP-3":
        score, flipped = _noisy(rng, str(world.rating[(c, t)]), RATINGS)
        return {"text": _passage(rng, s, t), "score": score}, flipped
    if task == "LaMP-4":
        return {"title": _pattern(rng, world, HEADLINES, c, t), "text": _passage(rng, s, t)}, False
    if task == "LaMP-5":
        return {"title": _pattern(rng, world, TITLES, c, t), "abstract": _passage(rng, s, t)}, False
    return {"text": _pattern(rng, world, TWEETS, c, t)}, False


@dataclass
class _Profiles:
    """Per user its dated profile docs; per doc its planted topic, author community and noise flag."""

    docs: dict[int, list[dict[str, str]]]
    topic: dict[str, str]
    community: dict[str, int]
    noisy: set[str]


def _profiles(task: str, rng: np.random.Generator, world: World, users: list[int]) -> _Profiles:
    """Write every user's profile: thin users 2–4 docs on one topic, others 8–14 over 2–3 topics (≥ 2 each)."""
    base = int(task[5:]) * 100_000
    out = _Profiles({}, {}, {}, set())
    day0 = np.datetime64("2012-01-01")
    for u in users:
        c, own = world.community[u], world.covered[u]
        low, high = THIN_DOCS if world.thin[u] else FULL_DOCS
        n = int(rng.integers(low, high + 1))
        fixed = [t for t in own for _ in range(2)][:n]
        topics = fixed + [str(x) for x in rng.choice(own, size=n - len(fixed))]
        topics = [topics[int(i)] for i in rng.permutation(n)]
        day = day0 + np.timedelta64(int(rng.integers(0, 3000)), "D")
        docs = []
        for t in topics:
            day = day + np.timedelta64(int(rng.integers(1, 60)), "D")
            doc_id = str(base + len(out.topic) + 1)
            fields, flipped = _doc_fields(task, rng, world, u, t)
            out.topic[doc_id], out.community[doc_id] = t, c
            if flipped:
                out.noisy.add(doc_id)
            docs.append({"id": doc_id, "date": str(day), **fields})
        out.docs[u] = docs
    return out


def _lamp1_refs(rng: np.random.Generator, world: World, prof: _Profiles, u: int, c: int, t: str) -> tuple[str, str]:
    """(gold, distractor) reference titles: a community mate's paper on t, and another community's paper on t."""
    if world.family != "communities":
        return _taste_refs(rng, world, prof, u, c, t)
    mates = [d for v, docs in prof.docs.items() if v != u for d in docs if prof.community[d["id"]] == c]
    gold_docs = [d for d in mates if prof.topic[d["id"]] == t]
    gold = _one(rng, gold_docs)["title"] if gold_docs else TITLES[c].format(a=t, b=t, c=t)
    rivals = [x for x in range(len(world.topics)) if x != c and t in world.topics[x]]
    other = _one(rng, rivals or [x for x in range(len(world.topics)) if x != c])
    topic = t if rivals else _one(rng, world.topics[other])
    far = [d for docs in prof.docs.values() for d in docs if prof.community[d["id"]] == other]
    far = [d for d in far if prof.topic[d["id"]] == topic]
    return gold, (_one(rng, far)["title"] if far else TITLES[other].format(a=topic, b=topic, c=topic))


def _taste_refs(rng: np.random.Generator, world: World, prof: _Profiles, u: int, c: int, t: str) -> tuple[str, str]:
    """LaMP-1 references outside the communities family: a same-taste paper on t (no_community: the user's own), and
    a paper on t by another taste (or a title in another pattern when there is none)."""
    on_t = [(v, d) for v, docs in prof.docs.items() for d in docs if prof.topic[d["id"]] == t]
    own = world.family == "no_community"
    gold_docs = [d for v, d in on_t if prof.community[d["id"]] == c and (v == u) == own]
    p = world.pattern[c]
    gold = _one(rng, gold_docs)["title"] if gold_docs else TITLES[p].format(a=t, b=t, c=t)
    far = [d for v, d in on_t if prof.community[d["id"]] != c and world.pattern[prof.community[d["id"]]] != p]
    other = TITLES[(p + 1) % len(TITLES)].format(a=t, b=t, c=t)
    return gold, (_one(rng, far)["title"] if far else other)


def _sample(task: str, rng: np.random.Generator, world: World, prof: _Profiles, u: int, t: str, noisy: bool):
    """(input, gold) of one sample of user u about topic t; the input never names the user's community."""
    c = world.community[u]
    if task == "LaMP-1":
        a, b, x = _pick(rng, TOPICS[t], 3)
        gold_ref, distractor = _lamp1_refs(rng, world, prof, u, c, t)
        first = bool(rng.random() < 0.5)
        refs = (gold_ref, distractor) if first else (distractor, gold_ref)
        title = _one(rng, NEUTRAL_TITLES).format(a=a, b=b, c=x)
        return INPUT_TEMPLATES[task].format(t=title, a=refs[0], b=refs[1]), "[1]" if first else "[2]"
    if task in ("LaMP-2", "LaMP-3"):
        gold, choices = (world.tag[(c, t)], LAMP2_TAGS) if task == "LaMP-2" else (str(world.rating[(c, t)]), RATINGS)
        return INPUT_TEMPLATES[task].format(x=_passage(rng, None, t)), _other(rng, gold, choices) if noisy else gold
    if task in ("LaMP-4", "LaMP-5"):
        gold = _pattern(rng, world, HEADLINES if task == "LaMP-4" else TITLES, c, t)
        return INPUT_TEMPLATES[task].format(x=_passage(rng, None, t)), gold
    neutral = _one(rng, NEUTRAL_TWEETS).format(a=_one(rng, TOPICS[t]), b=_one(rng, TOPICS[t]), c=_one(rng, TOPICS[t]))
    return INPUT_TEMPLATES[task].format(x=neutral), _pattern(rng, world, TWEETS, c, t)


def _task_data(task: str, world: World, seed: int) -> tuple[dict[str, tuple[list, dict]], dict[str, Any]]:
    """Questions/outputs per split and the manifest entry of one task (relevant documents included)."""
    if world.family == "tagging" and task == "LaMP-2":  # items many users label (data/demo_tagging.py)
        from prag_models.data.demo_tagging import tagging_task_data

        return tagging_task_data(world, seed)
    number = int(task[5:])
    rng = np.random.default_rng([seed, number])
    present = sorted({u for us in world.split_users.values() for u in us})
    prof = _profiles(task, rng, world, present)
    by_pair: dict[tuple[int, str], list[str]] = {}
    for doc_id, t in prof.topic.items():
        if doc_id not in prof.noisy:
            by_pair.setdefault((prof.community[doc_id], t), []).append(doc_id)
    files: dict[str, tuple[list, dict]] = {}
    info: dict[str, dict[str, Any]] = {}
    next_id = number * 1000 + 1
    for split in ("dev", "train"):
        split_users = world.split_users[split]
        n = len(split_users)
        missing = rng.permutation(np.arange(n) < n // 2)
        noisy = set(int(i) for i in rng.choice(n, size=round(LABEL_NOISE * n), replace=False)) if n else set()
        questions, golds = [], []
        for i, u in enumerate(split_users):
            c = world.community[u]
            own = [t for t in world.own_topics(u) if t in world.covered[u]]
            others = [t for t in world.own_topics(u) if t not in world.covered[u]]
            if world.family == "no_community":  # only the user's own history carries its labels
                missing[i] = False
            t = str(_one(rng, others if missing[i] else own))
            text, gold = _sample(task, rng, world, prof, u, t, i in noisy)
            sid, user_id = str(next_id), f"u{u:04d}"
            next_id += 1
            questions.append({"id": sid, "input": text, "profile": prof.docs[u], "user_id": user_id})
            golds.append({"id": sid, "output": gold})
            info[sid] = {"split": split, "user_id": user_id, "community": c, "topic": t}
            info[sid] |= {"own_topic_in_profile": not bool(missing[i]), "noisy_label": i in noisy}
            info[sid]["relevant_docs"] = by_pair.get((c, t), [])
        files[split] = (questions, {"task": f"LaMP_{number}", "golds": golds})
    entry = {
        "users": len(present),
        "docs": len(prof.topic),
        "samples": {split: len(world.split_users[split]) for split in ("train", "dev")},
        "community_of_user": {f"u{u:04d}": world.community[u] for u in present},
        "thin_profile": {f"u{u:04d}": world.thin[u] for u in present},
        "sample_info": info,
        "doc_topic": prof.topic,
        "noisy_docs": sorted(prof.noisy),
    }
    return files, entry


def _dump(path: Path, obj: Any) -> None:
    """Write JSON deterministically (UTF-8, fixed indentation, trailing newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def write_demo(
    root: Path,
    users: int = 144,
    communities: int = 6,
    dev_samples: int = 96,
    train_samples: int | None = None,
    seed: int = 7,
    tasks: tuple[str, ...] | list[str] = TASKS,
    family: str = DEFAULT_FAMILY,
) -> dict[str, Any]:
    """Write the demo LaMP files of a world family under root (``LaMP_X_time/{train,dev}/``); return the manifest."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")
    if not 2 <= communities <= MAX_COMMUNITIES:
        raise ValueError(f"communities must be in 2..{MAX_COMMUNITIES}, got {communities}")
    if users < communities:
        raise ValueError(f"users ({users}) must be at least communities ({communities})")
    if not 0 <= dev_samples <= users:
        raise ValueError(f"dev_samples must be in 0..users ({users}), got {dev_samples}")
    if train_samples is not None and train_samples < 0:
        raise ValueError(f"train_samples must be >= 0, got {train_samples}")
    chosen = [task_from_name(t) for t in tasks]
    world = build_world(family, users, communities, dev_samples, train_samples, seed)
    root = Path(root)
    params = {"users": users, "communities": communities, "dev_samples": dev_samples, "seed": seed}
    params |= {"train_samples": train_samples, "tasks": chosen}
    if family != DEFAULT_FAMILY:  # the communities family's manifest stays byte-identical to prag demo v2
        params["family"] = family
    manifest: dict[str, Any] = {"generator": GENERATOR, "params": params, **manifest_world(world), "tasks": {}}
    for task in chosen:
        files, entry = _task_data(task, world, seed)
        folder = root / f"LaMP_{task[5:]}_time"
        for split, (questions, outputs) in files.items():
            _dump(folder / split / f"{split}_questions.json", questions)
            _dump(folder / split / f"{split}_outputs.json", outputs)
        manifest["tasks"][task] = entry
    _dump(root / "demo_manifest.json", manifest)
    return manifest
