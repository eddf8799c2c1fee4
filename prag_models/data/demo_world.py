"""The demo's planted world, one builder per family (docs/demo_data.md "Families").

A world says, per user, who decides its labels (``community``: the planted truth the retrieval evaluation and the
oracle use), which topics it writes about (``group`` → ``topics``) and in which wording style (``style``); per taste
id the label of every topic it judges (``tag``, ``rating``, ``keys``) and its headline/title/tweet pattern.

- ``communities`` (default, unchanged since "prag demo v2"): the community decides topics, style and labels.
- ``split_taste``: topic groups (topics + style) and taste communities (labels) are drawn independently, so users
  who write about the same things judge them differently.
- ``no_community``: every user is its own taste; topics and style are drawn per user; only the user's own history
  carries its labels.
- ``alike_communities``: the communities' topics and style as in ``communities``, but one taste labels every topic
  for everybody: the communities exist and label alike, so no community's documents carry a better label.
- ``tagging``: split_taste's groups and tastes, and (LaMP-2) items that recur across many users: the label depends on
  the item and, for some items, on the user's taste (prag_models/data/demo_tagging.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prag_models.data.demo_vocab import STYLES, TOPICS
from prag_models.data.tasks import LABELS, LAMP2_TAGS

FAMILIES: tuple[str, ...] = ("communities", "split_taste", "no_community", "alike_communities", "tagging")
DEFAULT_FAMILY = "communities"
TOPICS_PER_COMMUNITY = 4
THIN_SHARE = 0.5  # share of users with a thin profile
RATINGS = LABELS["LaMP-3"]
#: LaMP-3 rating pairs of two communities sharing a topic: at least 2 stars apart ("5 in one, 2 in another").
_RATING_PAIRS = ((1, 3), (1, 4), (1, 5), (2, 4), (2, 5), (3, 5))


@dataclass
class World:
    """The planted truth shared by all tasks."""

    community: list[int]  # per user, the taste id that decides its labels (planted community)
    topics: list[list[str]]  # per topic group, its topics
    covered: list[list[str]]  # per user, the topics its profile covers
    thin: list[bool]
    tag: dict[tuple[int, str], str]
    rating: dict[tuple[int, str], int]
    keys: dict[tuple[int, str], tuple[str, str]]
    split_users: dict[str, list[int]]
    family: str = DEFAULT_FAMILY
    group: list[int] = field(default_factory=list)  # per user, its topic group (communities: its community)
    style: list[int] = field(default_factory=list)  # per user, its STYLES index
    pattern: dict[int, int] = field(default_factory=dict)  # per taste id, its HEADLINES/TITLES/TWEETS index
    items: list[Any] = field(default_factory=list)  # tagging: the items users label (data/demo_tagging.Item)

    def __post_init__(self) -> None:
        """Communities family: group, style and pattern all equal the community."""
        self.group = self.group or list(self.community)
        self.style = self.style or list(self.community)
        self.pattern = self.pattern or {c: c for c in set(self.community)}

    def own_topics(self, u: int) -> list[str]:
        """The topics user u's group writes about."""
        return self.topics[self.group[u]]


def pick(rng: np.random.Generator, seq: tuple[str, ...] | list[str], k: int) -> list[str]:
    """k distinct items of seq in random order."""
    return [seq[int(i)] for i in rng.choice(len(seq), size=k, replace=False)]


def one(rng: np.random.Generator, seq: tuple[Any, ...] | list[Any]) -> Any:
    """One random item of seq."""
    return seq[int(rng.integers(len(seq)))]


def _labels(rng: np.random.Generator, topics: list[list[str]], communities: int) -> tuple[dict, dict, dict]:
    """Per (community, topic): a tag, a rating and two key words, distinct between communities sharing a topic."""
    tag, rating, keys = {}, {}, {}
    pool = sorted({t for ts in topics for t in ts}, key=lambda t: list(TOPICS).index(t))
    for t in pool:
        sharing = [c for c in range(communities) if t in topics[c]]
        tags = pick(rng, LAMP2_TAGS, len(sharing))
        pair = list(one(rng, _RATING_PAIRS))
        ratings = [pair[int(i)] for i in rng.permutation(2)] + [int(x) + 1 for x in rng.choice(5, len(sharing))]
        words = pick(rng, TOPICS[t], 2 * len(sharing))
        for n, c in enumerate(sharing):
            tag[(c, t)], rating[(c, t)] = tags[n], int(ratings[n])
            keys[(c, t)] = (words[2 * n], words[2 * n + 1])
    return tag, rating, keys


def _splits(rng: np.random.Generator, users: int, dev_samples: int, train_samples: int | None) -> dict[str, list]:
    """The dev users and the train users (or train_samples samples cycling over the non-dev users)."""
    shuffled = [int(u) for u in rng.permutation(users)]
    dev, rest = sorted(shuffled[:dev_samples]), sorted(shuffled[dev_samples:])
    if train_samples is None:
        train = rest
    else:
        pool = rest or sorted(shuffled)
        train = [pool[i % len(pool)] for i in range(train_samples)] if pool else []
    return {"train": train, "dev": dev}


def _ring(rng: np.random.Generator, groups: int) -> list[list[str]]:
    """2·groups topics on a ring; group g is interested in the 4 topics 2g … 2g+3."""
    names = list(TOPICS)
    ring = [names[int(i)] for i in rng.permutation(len(names))[: 2 * groups]]
    return [[ring[(2 * g + j) % len(ring)] for j in range(TOPICS_PER_COMMUNITY)] for g in range(groups)]


def _coverage(rng: np.random.Generator, users: int, topics_of: list[list[str]]) -> tuple[list[bool], list[list[str]]]:
    """Thin users (THIN_SHARE of them) cover 1 of their topics, the others 2–3."""
    thin = [bool(x) for x in rng.random(users) < THIN_SHARE]
    covered = [pick(rng, topics_of[u], 1 if thin[u] else int(rng.integers(2, 4))) for u in range(users)]
    return thin, covered


def _communities(users: int, communities: int, dev_samples: int, train_samples: int | None, seed: int) -> World:
    """Communities decide topics, style and labels (the generator's original world, byte-identical)."""
    rng = np.random.default_rng(seed)
    topics = _ring(rng, communities)
    community = [int(c) for c in rng.permutation(np.arange(users) % communities)]
    tag, rating, keys = _labels(rng, topics, communities)
    thin, covered = _coverage(rng, users, [topics[c] for c in community])
    return World(community, topics, covered, thin, tag, rating, keys, _splits(rng, users, dev_samples, train_samples))


def _taste_labels(rng: np.random.Generator, topics: list[str], tastes: int) -> tuple[dict, dict, dict]:
    """Every taste labels every topic: distinct tags, ratings (distinct up to 5 tastes) and key words (up to 5)."""
    tag, rating, keys = {}, {}, {}
    for t in topics:
        tags = pick(rng, LAMP2_TAGS, tastes)
        ratings = [int(r) + 1 for r in rng.permutation(5)]
        words = pick(rng, TOPICS[t], 2 * min(tastes, 5))
        for c in range(tastes):
            tag[(c, t)], rating[(c, t)] = tags[c], ratings[c % 5]
            n = c % 5
            keys[(c, t)] = (words[2 * n], words[2 * n + 1])
    return tag, rating, keys


def _groups_and_tastes(rng: np.random.Generator, users: int, communities: int) -> tuple[list[int], list[int]]:
    """Each user's topic group and, drawn independently and balanced within every group, its taste community."""
    group = [int(g) for g in rng.permutation(np.arange(users) % communities)]
    taste = [0] * users
    for g in range(communities):
        members = [u for u in range(users) if group[u] == g]
        offset = int(rng.integers(communities))
        for u, c in zip(members, rng.permutation(np.arange(len(members)) + offset), strict=True):
            taste[u] = int(c) % communities
    return group, taste


def _split_taste(users: int, communities: int, dev_samples: int, train_samples: int | None, seed: int) -> World:
    """C topic groups (topics, style) crossed with C taste communities (labels), balanced within every group."""
    rng = np.random.default_rng([seed, 101])
    return _crossed_world(rng, users, communities, dev_samples, train_samples, "split_taste")[0]


def _crossed_world(rng: np.random.Generator, users: int, communities: int, dev_samples: int, train_samples: int | None,
                   family: str) -> tuple[World, list[str]]:  # fmt: skip
    """split_taste's world drawn from rng (topic groups crossed with taste communities), and its topic pool."""
    topics = _ring(rng, communities)
    group, taste = _groups_and_tastes(rng, users, communities)
    pool = sorted({t for ts in topics for t in ts}, key=lambda t: list(TOPICS).index(t))
    tag, rating, keys = _taste_labels(rng, pool, communities)
    thin, covered = _coverage(rng, users, [topics[g] for g in group])
    splits = _splits(rng, users, dev_samples, train_samples)
    return World(taste, topics, covered, thin, tag, rating, keys, splits, family, group, list(group)), pool


def _no_community(users: int, communities: int, dev_samples: int, train_samples: int | None, seed: int) -> World:
    """Every user is its own taste; its 4 topics (of 2·C), its style and its pattern are drawn per user."""
    rng = np.random.default_rng([seed, 102])
    names = list(TOPICS)
    ring = [names[int(i)] for i in rng.permutation(len(names))[: 2 * communities]]
    topics = [pick(rng, ring, TOPICS_PER_COMMUNITY) for _ in range(users)]
    style = [int(s) for s in rng.integers(0, len(STYLES), size=users)]
    pattern = {u: int(p) for u, p in enumerate(rng.integers(0, len(STYLES), size=users))}
    thin, covered = _coverage(rng, users, topics)
    tag, rating, keys = {}, {}, {}
    for u in range(users):
        for t in covered[u]:
            tag[(u, t)], rating[(u, t)] = one(rng, LAMP2_TAGS), int(rng.integers(1, 6))
            a, b = pick(rng, TOPICS[t], 2)
            keys[(u, t)] = (a, b)
    splits = _splits(rng, users, dev_samples, train_samples)
    me = list(range(users))
    return World(me, topics, covered, thin, tag, rating, keys, splits, "no_community", me, style, pattern)


def _alike_communities(users: int, communities: int, dev_samples: int, train_samples: int | None, seed: int) -> World:
    """The communities family's topic ring, topic groups and styles, with one taste (0) labelling every topic."""
    rng = np.random.default_rng([seed, 103])
    topics = _ring(rng, communities)
    group = [int(c) for c in rng.permutation(np.arange(users) % communities)]
    pool = sorted({t for ts in topics for t in ts}, key=lambda t: list(TOPICS).index(t))
    tag, rating, keys = _taste_labels(rng, pool, 1)
    thin, covered = _coverage(rng, users, [topics[g] for g in group])
    splits = _splits(rng, users, dev_samples, train_samples)
    return World([0] * users, topics, covered, thin, tag, rating, keys, splits, "alike_communities", group,
                 list(group), {0: 0})  # fmt: skip


def _tagging(users: int, communities: int, dev_samples: int, train_samples: int | None, seed: int) -> World:
    """split_taste's topic groups and tastes, plus a catalogue of items many users label (data/demo_tagging.py)."""
    from prag_models.data.demo_tagging import item_catalogue

    rng = np.random.default_rng([seed, 104])
    world, pool = _crossed_world(rng, users, communities, dev_samples, train_samples, "tagging")
    world.items = item_catalogue(rng, pool, communities)
    return world


def build_world(
    family: str, users: int, communities: int, dev_samples: int, train_samples: int | None, seed: int
) -> World:
    """The planted world of a family (see the module docstring)."""
    builders = {"communities": _communities, "split_taste": _split_taste, "no_community": _no_community,
                "alike_communities": _alike_communities, "tagging": _tagging}  # fmt: skip
    if family not in builders:
        raise ValueError(f"unknown demo family {family!r}; known: {list(FAMILIES)}")
    return builders[family](users, communities, dev_samples, train_samples, seed)


def manifest_world(world: World) -> dict[str, Any]:
    """The world's planted truth for the manifest (communities family: exactly the v2 entries)."""
    all_topics = sorted({t for ts in world.topics for t in ts})
    tastes = sorted(set(world.community))

    def judged(c: int) -> list[str]:
        if world.family == "communities":
            return world.topics[c]
        return [t for t in sorted({t for (x, t) in world.tag if x == c}, key=list(TOPICS).index)]

    out: dict[str, Any] = {"topic_words": {t: list(TOPICS[t]) for t in all_topics}}
    out["communities"] = {
        str(c): {
            "topics": judged(c),
            "lamp2_tag": {t: world.tag[(c, t)] for t in judged(c)},
            "lamp3_rating": {t: world.rating[(c, t)] for t in judged(c)},
            "key_words": {t: list(world.keys[(c, t)]) for t in judged(c)},
        }
        for c in tastes
    }
    if world.items:
        from prag_models.data.demo_tagging import manifest_items

        out["items"] = manifest_items(world.items)
    if world.family != "communities":
        out["family"] = world.family
        out["topic_group_of_user"] = {f"u{u:04d}": g for u, g in enumerate(world.group)}
        out["style_of_user"] = {f"u{u:04d}": s for u, s in enumerate(world.style)}
    return out
