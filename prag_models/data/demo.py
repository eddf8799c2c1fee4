"""Embedded demo: deterministic LaMP-format files with planted collaborative structure (details: docs/demo_data.md).

``write_demo`` writes ``root/LaMP_X_time/{train,dev}/{split}_{questions,outputs}.json`` and ``demo_manifest.json``
(the planted truth) with ``numpy.random.default_rng`` only. Planted, for 2–8 communities of users ``u0000``…:
each community owns 4 of 32 topics (10 distinctive words each), a wording style and headline/title/tweet patterns,
and per topic t a LaMP-2 tag τ(c,t), a LaMP-3 rating ρ(c,t) (4 distinct per community) and two key words its
generation patterns reuse. A user covers 2 of its community's topics with 6–14 dated docs (labels τ/ρ, 10 % noise).
Each user has one sample (dev, then train) about a community topic that, in ⌊n/2⌋ of a split's n samples, is absent
from the user's own profile; golds follow τ/ρ except in exactly round(10 % · n) samples. LaMP-1 golds are a
community mate's paper title on the topic, the distractor another community's, at [1]/[2] uniformly at random.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prag_models.data.tasks import INPUT_TEMPLATES, LABELS, LAMP2_TAGS, TASKS, task_from_name

_TOPIC_WORDS = {
    "astronomy": "telescope nebula galaxy comet orbit eclipse constellation asteroid quasar stargazing",
    "baking": "sourdough croissant oven yeast pastry dough brioche icing crumb flour",
    "cycling": "bicycle peloton derailleur saddle gravel sprint chainring helmet climb velodrome",
    "jazz": "saxophone trumpet improvisation swing bebop quartet trombone syncopation bassline nightclub",
    "gardening": "compost tomato seedling mulch trellis greenhouse pruning perennial orchard soil",
    "chess": "gambit checkmate bishop rook endgame opening pawn grandmaster castling stalemate",
    "sailing": "yacht regatta mast keel harbor anchor spinnaker tide rigging starboard",
    "volcanoes": "lava magma eruption crater caldera ash basalt pumice geyser tectonic",
    "robotics": "actuator servo gripper lidar microcontroller firmware chassis sensor kinematics autonomy",
    "birds": "warbler heron finch migration plumage nest owl sparrow binoculars birdsong",
    "coffee": "espresso barista roast arabica latte grinder crema cappuccino bean brew",
    "mountaineering": "summit glacier crampon ridge altitude belay carabiner avalanche basecamp sherpa",
    "photography": "aperture shutter lens tripod exposure portrait darkroom zoom bokeh viewfinder",
    "medieval": "castle knight monastery crusade feudal manuscript siege cathedral jousting armor",
    "surfing": "wave surfboard barrel wetsuit reef swell paddle longboard shoreline wipeout",
    "cryptography": "cipher encryption hash keypair plaintext ciphertext blockchain nonce protocol decryption",
    "oceanography": "coral plankton current salinity trench kelp dolphin seabed upwelling whale",
    "knitting": "yarn wool stitch needle sweater scarf crochet purl skein cardigan",
    "basketball": "dunk rebound hoop playoff dribble layup backboard guard jumpshot timeout",
    "pottery": "clay kiln slip wheel ceramic porcelain vase stoneware earthenware potter",
    "linguistics": "syntax phoneme grammar dialect morphology vowel semantics lexicon etymology pronunciation",
    "beekeeping": "hive honey beeswax queen pollen apiary swarm nectar drone honeycomb",
    "wine": "vineyard merlot tannin vintage sommelier cork chardonnay cellar grape decanter",
    "trains": "locomotive railway carriage timetable platform steam conductor tracks signalbox freight",
    "chemistry": "molecule catalyst reagent titration polymer isotope beaker solvent enzyme oxidation",
    "theater": "stage playwright rehearsal curtain actor monologue audience backstage costume script",
    "dinosaurs": "fossil raptor jurassic skeleton paleontologist triceratops excavation sediment amber extinction",
    "skiing": "slope powder chairlift slalom snowboard piste goggles moguls resort downhill",
    "poetry": "sonnet stanza rhyme verse haiku metaphor ballad meter elegy couplet",
    "architecture": "facade skyscraper blueprint column atrium concrete balcony archway cantilever courtyard",
    "fishing": "trout reel bait lure angler riverbank salmon fly tackle catch",
    "genetics": "genome chromosome mutation allele sequencing protein heredity gene phenotype crispr",
}
TOPICS: dict[str, tuple[str, ...]] = {name: tuple(words.split()) for name, words in _TOPIC_WORDS.items()}
TOPICS_PER_COMMUNITY = 4
MAX_COMMUNITIES = len(TOPICS) // TOPICS_PER_COMMUNITY


def _bar(text: str) -> tuple[str, ...]:
    """Split a " | "-separated list of phrases."""
    return tuple(part.strip() for part in text.split("|"))


# Per-community wording style "opener / closer" and patterns (index = community); in the patterns {a} {b} are the
# (community, topic) key words and {c} another word of the topic.
STYLES = tuple(
    tuple(pair.split(" / "))
    for pair in _bar(
        "to be fair / all things considered quite remarkable | no kidding / super fun and totally worth it | "
        "in short / a solid take and worth noting | believe me / pure magic hands down | "
        "frankly / a bit odd but by and large fine | okay so / low key amazing for real | "
        "indeed / rather splendid on balance | heads up / big news so stay tuned"
    )
)
HEADLINES = _bar(
    "Why {a} and {b} matter for {c} | {a} meets {b}: a {c} story | The {a} report: {b}, {c} and more | "
    "How {a} changed {b} and {c} forever | {a}, {b} and the future of {c} | Inside the {a} and {b} {c} scene | "
    "Ten {a} lessons from {b} and {c} | Breaking: {a} and {b} hit {c} record"
)
TITLES = _bar(
    "Towards robust {a} {b} for {c} analysis | On the {a} of {b} and {c} | "
    "Learning {a} {b} representations with {c} | A unified {a} framework for {b} {c} | "
    "Scalable {a} {b} under {c} constraints | Revisiting {a} in {b} {c} systems | "
    "{a}-aware {b} modelling via {c} | A {a} benchmark: {b} meets {c}"
)
TWEETS = _bar(
    "to be fair the {a} and {b} were quite remarkable today, {c} all things considered | "
    "no kidding {a} plus {b} is super fun, {c} totally worth it | "
    "in short: {a}, {b} and {c} today, a solid take and worth noting | "
    "believe me {a} and {b} are pure magic, {c} hands down | "
    "frankly the {a} {b} thing is a bit odd, {c} by and large | "
    "okay so {a} and {b} low key amazing, {c} for real | "
    "indeed the {a} with {b} was rather splendid, {c} on balance | "
    "heads up: {a} and {b} are big news, {c} so stay tuned"
)
NEUTRAL_TWEETS = _bar(
    "spent the afternoon with {a}, {b} and {c} | cannot stop thinking about {a}, {b} and {c} | "
    "today was all {a} and {b} with some {c} | my weekend in three words: {a}, {b}, {c}"
)
FILLER = _bar(
    "on a quiet weekend with | after a long week of | the story follows | people keep talking about | "
    "a short piece on | somewhere between | the first chapter covers | we spent hours on | nothing beats | "
    "the old town is known for | a new look at | the local club loves | an honest account of | "
    "the whole family enjoyed | a careful study of | the best part was"
)
LABEL_NOISE = 0.1
RATINGS = LABELS["LaMP-3"]
MIN_DOCS, MAX_DOCS = 6, 14


@dataclass
class _World:
    """The planted truth shared by all tasks."""

    community: list[int]
    topics: list[list[str]]
    covered: list[tuple[str, str]]
    tag: dict[tuple[int, str], str]
    rating: dict[tuple[int, str], int]
    keys: dict[tuple[int, str], tuple[str, str]]
    split_users: dict[str, list[int]]


def _pick(rng: np.random.Generator, seq: tuple[str, ...] | list[str], k: int) -> list[str]:
    """k distinct items of seq in random order."""
    return [seq[int(i)] for i in rng.choice(len(seq), size=k, replace=False)]


def _one(rng: np.random.Generator, seq: tuple[Any, ...] | list[Any]) -> Any:
    """One random item of seq."""
    return seq[int(rng.integers(len(seq)))]


def _build_world(users: int, communities: int, dev_samples: int, train_samples: int | None, seed: int) -> _World:
    """Communities, topics, label preferences, topic coverage and the dev/train users."""
    rng = np.random.default_rng(seed)
    names = list(TOPICS)
    order = rng.permutation(len(names))
    topics = [[names[int(i)] for i in order[c * 4 : c * 4 + 4]] for c in range(communities)]
    community = [int(c) for c in rng.permutation(np.arange(users) % communities)]
    tag, rating, keys = {}, {}, {}
    for c in range(communities):
        tags = _pick(rng, LAMP2_TAGS, TOPICS_PER_COMMUNITY)
        ratings = rng.choice(5, size=TOPICS_PER_COMMUNITY, replace=False) + 1
        for t, tg, r in zip(topics[c], tags, ratings, strict=True):
            tag[(c, t)], rating[(c, t)] = tg, int(r)
            a, b = _pick(rng, TOPICS[t], 2)
            keys[(c, t)] = (a, b)
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    covered: list[tuple[str, str]] = [("", "")] * users
    for c in range(communities):
        deal = [pairs[int(i)] for i in rng.permutation(len(pairs))]
        for n, u in enumerate(u for u in range(users) if community[u] == c):
            i, j = deal[n % len(deal)]
            covered[u] = (topics[c][i], topics[c][j])
    shuffled = [int(u) for u in rng.permutation(users)]
    dev, rest = sorted(shuffled[:dev_samples]), sorted(shuffled[dev_samples:])
    if train_samples is None:
        train = rest
    else:
        pool = rest or sorted(shuffled)
        train = [pool[i % len(pool)] for i in range(train_samples)] if pool else []
    return _World(community, topics, covered, tag, rating, keys, {"train": train, "dev": dev})


def _passage(rng: np.random.Generator, c: int, t: str, clauses: int = 4) -> str:
    """A 30–40 word text about topic t in community c's style."""
    words = _pick(rng, TOPICS[t], 2 * clauses)
    parts = [f"{_one(rng, FILLER)} {words[2 * i]} and {words[2 * i + 1]}" for i in range(clauses)]
    opener, closer = STYLES[c]
    return f"{opener}, " + ", ".join(parts) + f"; {closer}."


def _pattern(rng: np.random.Generator, world: _World, patterns: tuple[str, ...], c: int, t: str) -> str:
    """Community c's pattern filled with the two (c,t) key words and one more word of topic t."""
    a, b = world.keys[(c, t)]
    extra = _one(rng, [w for w in TOPICS[t] if w not in (a, b)])
    return patterns[c].format(a=a, b=b, c=extra)


def _other(rng: np.random.Generator, value: str, choices: tuple[str, ...]) -> str:
    """A random choice different from value."""
    return str(_one(rng, [x for x in choices if x != value]))


def _noisy(rng: np.random.Generator, value: str, choices: tuple[str, ...]) -> str:
    """value, or with probability LABEL_NOISE another of the choices."""
    return _other(rng, value, choices) if rng.random() < LABEL_NOISE else value


def _doc_fields(task: str, rng: np.random.Generator, world: _World, c: int, t: str) -> dict[str, str]:
    """The task fields of one profile document about topic t written by a member of community c."""
    if task == "LaMP-1":
        a, b, x = _pick(rng, TOPICS[t], 3)
        return {"title": TITLES[c].format(a=a, b=b, c=x), "abstract": _passage(rng, c, t)}
    if task == "LaMP-2":
        return {"description": _passage(rng, c, t), "tag": _noisy(rng, world.tag[(c, t)], LAMP2_TAGS)}
    if task == "LaMP-3":
        return {"text": _passage(rng, c, t), "score": _noisy(rng, str(world.rating[(c, t)]), RATINGS)}
    if task == "LaMP-4":
        return {"title": _pattern(rng, world, HEADLINES, c, t), "text": _passage(rng, c, t)}
    if task == "LaMP-5":
        return {"title": _pattern(rng, world, TITLES, c, t), "abstract": _passage(rng, c, t)}
    return {"text": _pattern(rng, world, TWEETS, c, t)}


def _profiles(task: str, rng: np.random.Generator, world: _World, users: list[int]) -> tuple[dict, dict]:
    """Per user its dated profile docs; plus the planted topic of every doc."""
    base = int(task[5:]) * 100_000
    profiles: dict[int, list[dict[str, str]]] = {}
    doc_topic: dict[str, str] = {}
    day0 = np.datetime64("2012-01-01")
    for u in users:
        c, (t1, t2) = world.community[u], world.covered[u]
        n = int(rng.integers(MIN_DOCS, MAX_DOCS + 1))
        topics = [t1, t1, t2, t2] + [str(x) for x in rng.choice([t1, t2], size=n - 4)]
        topics = [topics[int(i)] for i in rng.permutation(n)]
        day = day0 + np.timedelta64(int(rng.integers(0, 3000)), "D")
        docs = []
        for t in topics:
            day = day + np.timedelta64(int(rng.integers(1, 60)), "D")
            doc_id = str(base + len(doc_topic) + 1)
            doc_topic[doc_id] = t
            docs.append({"id": doc_id, "date": str(day), **_doc_fields(task, rng, world, c, t)})
        profiles[u] = docs
    return profiles, doc_topic


def _lamp1_refs(
    rng: np.random.Generator, world: _World, profiles: dict, doc_topic: dict, u: int, c: int, t: str
) -> tuple[str, str]:
    """(gold, distractor) reference titles for a LaMP-1 question of user u about topic t."""
    mates = [v for v in profiles if v != u and world.community[v] == c]
    gold_docs = [d for v in mates for d in profiles[v] if doc_topic[d["id"]] == t]
    gold = _one(rng, gold_docs)["title"] if gold_docs else _doc_fields("LaMP-1", rng, world, c, t)["title"]
    other = _one(rng, [x for x in range(len(world.topics)) if x != c])
    t2 = _one(rng, world.topics[other])
    far_docs = [d for v in profiles if world.community[v] == other for d in profiles[v] if doc_topic[d["id"]] == t2]
    if far_docs:
        return gold, _one(rng, far_docs)["title"]
    a, b, x = _pick(rng, TOPICS[t2], 3)
    return gold, TITLES[other].format(a=a, b=b, c=x)


def _sample(
    task: str, rng: np.random.Generator, world: _World, ctx: tuple[dict, dict], u: int, t: str, noisy: bool
) -> tuple[str, str]:
    """(input, gold) of one sample of user u about topic t."""
    c = world.community[u]
    if task == "LaMP-1":
        a, b, x = _pick(rng, TOPICS[t], 3)
        gold_ref, distractor = _lamp1_refs(rng, world, ctx[0], ctx[1], u, c, t)
        first = bool(rng.random() < 0.5)
        refs = (gold_ref, distractor) if first else (distractor, gold_ref)
        title = TITLES[c].format(a=a, b=b, c=x)
        return INPUT_TEMPLATES[task].format(t=title, a=refs[0], b=refs[1]), "[1]" if first else "[2]"
    if task in ("LaMP-2", "LaMP-3"):
        gold, choices = (world.tag[(c, t)], LAMP2_TAGS) if task == "LaMP-2" else (str(world.rating[(c, t)]), RATINGS)
        return INPUT_TEMPLATES[task].format(x=_passage(rng, c, t)), _other(rng, gold, choices) if noisy else gold
    if task == "LaMP-4":
        return INPUT_TEMPLATES[task].format(x=_passage(rng, c, t)), _pattern(rng, world, HEADLINES, c, t)
    if task == "LaMP-5":
        return INPUT_TEMPLATES[task].format(x=_passage(rng, c, t)), _pattern(rng, world, TITLES, c, t)
    gold = _pattern(rng, world, TWEETS, c, t)
    a, b = world.keys[(c, t)]
    neutral = _one(rng, NEUTRAL_TWEETS).format(a=a, b=b, c=_one(rng, TOPICS[t]))
    return INPUT_TEMPLATES[task].format(x=neutral), gold


def _task_data(task: str, world: _World, seed: int) -> tuple[dict[str, tuple[list, dict]], dict[str, Any]]:
    """Questions/outputs per split and the manifest entry of one task."""
    number = int(task[5:])
    rng = np.random.default_rng([seed, number])
    present = sorted({u for us in world.split_users.values() for u in us})
    profiles, doc_topic = _profiles(task, rng, world, present)
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
            own = [t for t in world.topics[c] if t in world.covered[u]]
            others = [t for t in world.topics[c] if t not in world.covered[u]]
            t = str(_one(rng, others if missing[i] else own))
            text, gold = _sample(task, rng, world, (profiles, doc_topic), u, t, i in noisy)
            sid, user_id = str(next_id), f"u{u:04d}"
            next_id += 1
            questions.append({"id": sid, "input": text, "profile": profiles[u], "user_id": user_id})
            golds.append({"id": sid, "output": gold})
            info[sid] = {"split": split, "user_id": user_id, "community": c, "topic": t}
            info[sid] |= {"own_topic_in_profile": not bool(missing[i]), "noisy_label": i in noisy}
        files[split] = (questions, {"task": f"LaMP_{number}", "golds": golds})
    entry = {
        "users": len(present),
        "docs": len(doc_topic),
        "samples": {split: len(world.split_users[split]) for split in ("train", "dev")},
        "community_of_user": {f"u{u:04d}": world.community[u] for u in present},
        "sample_info": info,
        "doc_topic": doc_topic,
    }
    return files, entry


def _dump(path: Path, obj: Any) -> None:
    """Write JSON deterministically (UTF-8, fixed indentation, trailing newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def write_demo(
    root: Path,
    users: int = 48,
    communities: int = 6,
    dev_samples: int = 24,
    train_samples: int | None = None,
    seed: int = 7,
    tasks: tuple[str, ...] | list[str] = TASKS,
) -> dict[str, Any]:
    """Write the demo LaMP files under root (layout ``LaMP_X_time/{train,dev}/``) and return the manifest."""
    if not 2 <= communities <= MAX_COMMUNITIES:
        raise ValueError(f"communities must be in 2..{MAX_COMMUNITIES}, got {communities}")
    if users < communities:
        raise ValueError(f"users ({users}) must be at least communities ({communities})")
    if not 0 <= dev_samples <= users:
        raise ValueError(f"dev_samples must be in 0..users ({users}), got {dev_samples}")
    if train_samples is not None and train_samples < 0:
        raise ValueError(f"train_samples must be >= 0, got {train_samples}")
    chosen = [task_from_name(t) for t in tasks]
    world = _build_world(users, communities, dev_samples, train_samples, seed)
    root = Path(root)
    params = {"users": users, "communities": communities, "dev_samples": dev_samples, "seed": seed}
    params |= {"train_samples": train_samples, "tasks": chosen}
    manifest: dict[str, Any] = {
        "generator": "prag demo v1",
        "params": params,
        "topic_words": {t: list(TOPICS[t]) for c in range(communities) for t in world.topics[c]},
        "communities": {
            str(c): {
                "topics": world.topics[c],
                "lamp2_tag": {t: world.tag[(c, t)] for t in world.topics[c]},
                "lamp3_rating": {t: world.rating[(c, t)] for t in world.topics[c]},
                "key_words": {t: list(world.keys[(c, t)]) for t in world.topics[c]},
            }
            for c in range(communities)
        },
        "tasks": {},
    }
    for task in chosen:
        files, entry = _task_data(task, world, seed)
        folder = root / f"LaMP_{task[5:]}_time"
        for split, (questions, outputs) in files.items():
            _dump(folder / split / f"{split}_questions.json", questions)
            _dump(folder / split / f"{split}_outputs.json", outputs)
        manifest["tasks"][task] = entry
    _dump(root / "demo_manifest.json", manifest)
    return manifest
