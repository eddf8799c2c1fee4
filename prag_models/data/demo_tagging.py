"""The ``tagging`` demo family's items and its LaMP-2 files (docs/demo_data.md "Families"): like real tagging data,
items recur across many users, so a user's next item has usually been labelled by others already.

- **Items.** Every topic of the world has ``ITEMS_PER_TOPIC`` items, each with a made-up name and one fixed neutral
  description (its "movie description"), and a popularity: some items are labelled by many users, most by a few.
- **The label depends on the item** — one tag for everybody — and, for ``TASTE_ITEM_SHARE`` of the items, **on the
  user's taste**: the tastes fall into two camps per topic (the same split for every item of the topic), each camp
  with its own tag for the item. Tags of a topic's items come from a small palette of the topic's tags, so similar
  items carry similar tags.
- **Profiles** (LaMP-2) are the items a user labelled earlier (thin users 2–4, the others 8–14, drawn by popularity
  from the topics the user covers), each document ``'description': <the item's description> 'tag': <the user's tag>``
  with ``LABEL_NOISE`` (20 %) of the tags another tag at random — users tag sloppily, and on real tagging data only
  about half of the other users' documents about an item carry the asker's tag. Users who gave an item the same tag
  wrote **identical** documents.
- **Samples** ask for the tag of the user's next item: one of its topic group's items it has not labelled, drawn by
  popularity. The gold is the user's label for the item (10 % of the samples another tag, as elsewhere).
- **Relevant** documents of a sample: the documents about its item whose tag is the asker's planted label for the
  item, whoever wrote them (the label, not the author, is what an identical text carries).

The other tasks of the family are written as in ``split_taste`` (topic groups crossed with tastes).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from prag_models.data.demo_vocab import FILLER, NEUTRAL_OPENERS, TOPICS
from prag_models.data.tasks import INPUT_TEMPLATES, LAMP2_TAGS

ITEMS_PER_TOPIC = 4
TASTE_ITEM_SHARE = 0.5  # items whose tag depends on the user's taste
TOPIC_PALETTE = 3  # tags a topic's items draw from
POPULARITY_EXPONENT = 0.8  # an item's weight is 1 / (popularity rank + 1) ** this
LABEL_NOISE = 0.2  # of the documents' tags; 10 % of the samples' golds are another tag, as in every family
GOLD_NOISE = 0.1
THIN_DOCS, FULL_DOCS = (2, 4), (8, 14)
_NAME_WORDS = (
    "silent golden broken hidden crimson distant frozen hollow lonely midnight northern paper quiet restless scarlet "
    "secret shattered silver sleeping wandering",
    "river mirror garden harbor lantern meadow orchard signal voyage window compass echo island letter machine "
    "promise shadow summer theory winter",
)


@dataclass(frozen=True)
class Item:
    """One item users label: its name, topic, fixed description and tags (per taste camp where taste decides)."""

    name: str
    topic: str
    description: str
    tag: str  # the tag everybody gives, where the item's tag does not depend on taste
    taste_tags: tuple[str, ...] = ()  # per taste id, where it does

    def label(self, taste: int) -> str:
        """The tag a user of this taste gives the item (before noise)."""
        return self.taste_tags[taste] if self.taste_tags else self.tag


def _description(rng: np.random.Generator, name: str, topic: str) -> str:
    """A neutral 30–40 word description of an item of the topic, opened by its name."""
    words = [TOPICS[topic][int(i)] for i in rng.choice(len(TOPICS[topic]), size=8, replace=False)]
    parts = [f"{FILLER[int(rng.integers(len(FILLER)))]} {words[2 * i]} and {words[2 * i + 1]}" for i in range(4)]
    return f"{name}, {NEUTRAL_OPENERS[int(rng.integers(len(NEUTRAL_OPENERS)))]}: " + ", ".join(parts) + "."


def item_catalogue(rng: np.random.Generator, topics: list[str], tastes: int) -> list[Item]:
    """``ITEMS_PER_TOPIC`` items per topic with unique names; taste decides the tag of about ``TASTE_ITEM_SHARE``."""
    adjectives, nouns = (words.split() for words in _NAME_WORDS)
    names = [f"The {a.title()} {n.title()}" for a, n in itertools.product(adjectives, nouns)]
    chosen = rng.choice(len(names), size=ITEMS_PER_TOPIC * len(topics), replace=False)
    items = []
    for t_index, topic in enumerate(topics):
        palette = [LAMP2_TAGS[int(i)] for i in rng.choice(len(LAMP2_TAGS), size=TOPIC_PALETTE, replace=False)]
        camp = rng.permutation(np.arange(tastes) % 2)  # which tastes side together on this topic's items
        for j in range(ITEMS_PER_TOPIC):
            name = names[int(chosen[t_index * ITEMS_PER_TOPIC + j])]
            tag = palette[int(rng.integers(TOPIC_PALETTE))]
            taste_tags: tuple[str, ...] = ()
            if rng.random() < TASTE_ITEM_SHARE:
                camp_tags = [palette[int(i)] for i in rng.choice(TOPIC_PALETTE, size=2, replace=False)]
                taste_tags = tuple(camp_tags[int(c)] for c in camp)
            items.append(Item(name, topic, _description(rng, name, topic), tag, taste_tags))
    return items


def popularity(rng: np.random.Generator, n: int) -> np.ndarray:
    """Weights of n items: a random popularity rank each, weight 1 / (rank + 1) ** ``POPULARITY_EXPONENT``."""
    return 1.0 / (rng.permutation(n) + 1.0) ** POPULARITY_EXPONENT


def _draw(rng: np.random.Generator, candidates: list[int], weights: np.ndarray, size: int) -> list[int]:
    """``size`` distinct candidates drawn with probability proportional to their weights."""
    if not candidates:
        return []
    p = weights[candidates] / weights[candidates].sum()
    return [candidates[int(i)] for i in rng.choice(len(candidates), size=min(size, len(candidates)), replace=False,
                                                   p=p)]  # fmt: skip


def _tag(rng: np.random.Generator, planted: str) -> tuple[str, bool]:
    """The planted tag, or with probability LABEL_NOISE another tag (and True)."""
    if rng.random() < LABEL_NOISE:
        others = [t for t in LAMP2_TAGS if t != planted]
        return others[int(rng.integers(len(others)))], True
    return planted, False


def tagging_task_data(world: Any, seed: int) -> tuple[dict[str, tuple[list, dict]], dict[str, Any]]:
    """LaMP-2 questions/outputs per split and the task's manifest entry for a world (demo_world.World, which imports
    this module) of the tagging family."""
    rng = np.random.default_rng([seed, 2, 104])
    items = world.items
    weights = popularity(rng, len(items))
    of_topic = {t: [i for i, item in enumerate(items) if item.topic == t] for t in {it.topic for it in items}}
    present = sorted({u for us in world.split_users.values() for u in us})
    docs: dict[int, list[dict[str, str]]] = {}
    labelled: dict[int, set[int]] = {}
    doc_topic: dict[str, str] = {}
    doc_item: dict[str, str] = {}
    by_item_tag: dict[tuple[int, str], list[str]] = {}
    noisy: list[str] = []
    day0 = np.datetime64("2012-01-01")
    for u in present:
        low, high = THIN_DOCS if world.thin[u] else FULL_DOCS
        candidates = [i for t in world.covered[u] for i in of_topic[t]]
        chosen = _draw(rng, candidates, weights, int(rng.integers(low, high + 1)))
        day = day0 + np.timedelta64(int(rng.integers(0, 3000)), "D")
        docs[u], labelled[u] = [], set(chosen)
        for i in chosen:
            day = day + np.timedelta64(int(rng.integers(1, 60)), "D")
            doc_id = str(200_000 + len(doc_topic) + 1)
            tag, flipped = _tag(rng, items[i].label(world.community[u]))
            docs[u].append({"id": doc_id, "date": str(day), "description": items[i].description, "tag": tag})
            doc_topic[doc_id], doc_item[doc_id] = items[i].topic, items[i].name
            by_item_tag.setdefault((i, tag), []).append(doc_id)
            if flipped:
                noisy.append(doc_id)
    files: dict[str, tuple[list, dict]] = {}
    info: dict[str, dict[str, Any]] = {}
    next_id = 2001
    for split in ("dev", "train"):
        split_users = world.split_users[split]
        n = len(split_users)
        noisy_gold = {int(i) for i in rng.choice(n, size=round(GOLD_NOISE * n), replace=False)} if n else set()
        questions, golds = [], []
        for j, u in enumerate(split_users):
            taste = world.community[u]
            unseen = [i for t in world.own_topics(u) for i in of_topic[t] if i not in labelled[u]]
            i = _draw(rng, unseen, weights, 1)[0]
            planted = items[i].label(taste)
            other_tags = [t for t in LAMP2_TAGS if t != planted]
            gold = other_tags[int(rng.integers(len(other_tags)))] if j in noisy_gold else planted
            sid, user_id = str(next_id), f"u{u:04d}"
            next_id += 1
            text = INPUT_TEMPLATES["LaMP-2"].format(x=items[i].description)
            questions.append({"id": sid, "input": text, "profile": docs[u], "user_id": user_id})
            golds.append({"id": sid, "output": gold})
            others = sum(len(v) for (x, _), v in by_item_tag.items() if x == i)
            info[sid] = {"split": split, "user_id": user_id, "community": taste, "topic": items[i].topic,
                         "item": items[i].name, "own_topic_in_profile": items[i].topic in world.covered[u],
                         "noisy_label": j in noisy_gold, "item_documents": others,
                         "relevant_docs": by_item_tag.get((i, planted), [])}  # fmt: skip
        files[split] = (questions, {"task": "LaMP_2", "golds": golds})
    entry = {
        "users": len(present), "docs": len(doc_topic),
        "samples": {split: len(world.split_users[split]) for split in ("train", "dev")},
        "community_of_user": {f"u{u:04d}": world.community[u] for u in present},
        "thin_profile": {f"u{u:04d}": world.thin[u] for u in present},
        "sample_info": info, "doc_topic": doc_topic, "doc_item": doc_item, "noisy_docs": sorted(noisy),
    }  # fmt: skip
    return files, entry


def manifest_items(items: list[Item]) -> dict[str, Any]:
    """The items' planted truth for the manifest: topic, description and tags (per taste where taste decides)."""
    return {item.name: {"topic": item.topic, "description": item.description, "tag": item.tag,
                        "taste_tags": list(item.taste_tags)} for item in items}  # fmt: skip
