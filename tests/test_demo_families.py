"""Demo families (docs/demo_data.md "Families"): each generates and has the properties it claims."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from prag_models.config.settings import ConfigError, load_settings
from prag_models.data.demo import write_demo
from prag_models.data.lamp import load_lamp_task

TASKS = ("LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4", "LaMP-7")


def _world(root: Path, family: str) -> tuple[dict, dict]:
    """A 48-user, 4-community world of the family with the listed tasks loaded back."""
    manifest = write_demo(root, users=48, communities=4, dev_samples=24, tasks=TASKS, family=family)
    return manifest, {task: load_lamp_task(root, task) for task in TASKS}


@pytest.fixture(scope="module")
def split_taste(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    return _world(tmp_path_factory.mktemp("split"), "split_taste")


@pytest.fixture(scope="module")
def no_community(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    return _world(tmp_path_factory.mktemp("none"), "no_community")


@pytest.fixture(scope="module")
def alike_communities(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    return _world(tmp_path_factory.mktemp("alike"), "alike_communities")


def _by_doc(loaded: dict, task: str) -> dict[str, tuple[str, object]]:
    """doc_id -> (author, document) over both splits."""
    return {d.doc_id: (s.user_id, d) for split in loaded[task].values() for s in split for d in s.profile}


@pytest.mark.parametrize("family", ["split_taste", "no_community", "alike_communities", "tagging"])
def test_families_are_deterministic_and_differ_from_the_default(tmp_path: Path, family: str) -> None:
    kwargs = dict(users=12, communities=3, dev_samples=6, tasks=("LaMP-2",))
    write_demo(tmp_path / "a", family=family, **kwargs)
    write_demo(tmp_path / "b", family=family, **kwargs)
    write_demo(tmp_path / "c", **kwargs)
    files = [
        sorted((p.relative_to(tmp_path / x), p.read_bytes()) for p in (tmp_path / x).rglob("*.json")) for x in "abc"
    ]
    assert files[0] == files[1] and files[0] != files[2]


def test_unknown_family_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="family"):
        write_demo(tmp_path, users=8, communities=2, dev_samples=2, family="tribes")
    with pytest.raises(ConfigError, match="demo_family"):
        load_settings(environ={"PRAG__DATA__DEMO_FAMILY": "tribes"}, home=str(tmp_path))
    assert load_settings(environ={"PRAG__DATA__DEMO_FAMILY": "split_taste"}, home=str(tmp_path)).data.demo_family == (
        "split_taste"
    )


def test_settings_know_every_family() -> None:
    """data.demo_family accepts exactly the families the generator writes."""
    from prag_models.config.settings import DEMO_FAMILIES
    from prag_models.data.demo_world import FAMILIES

    assert DEMO_FAMILIES == FAMILIES


def test_split_taste_topic_neighbours_and_label_neighbours_disagree(split_taste: tuple) -> None:
    """Users of one topic group (same topics, same wording style) hold every taste; tastes cross the groups."""
    from sklearn.metrics import adjusted_rand_score

    manifest, _ = split_taste
    entry = manifest["tasks"]["LaMP-2"]
    users = sorted(entry["community_of_user"])
    group = [manifest["topic_group_of_user"][u] for u in users]
    taste = [entry["community_of_user"][u] for u in users]
    assert abs(adjusted_rand_score(group, taste)) < 0.1
    for g in set(group):
        assert len({t for t, x in zip(taste, group, strict=True) if x == g}) == 4
    same_group = [(a, b) for a in range(len(users)) for b in range(a) if group[a] == group[b]]
    assert sum(taste[a] == taste[b] for a, b in same_group) / len(same_group) < 0.35


def test_split_taste_same_topic_other_taste_conflicts(split_taste: tuple) -> None:
    """For every LaMP-2 query, the same-group users' docs on its topic mostly carry another tag than the gold's."""
    manifest, loaded = split_taste
    entry = manifest["tasks"]["LaMP-2"]
    docs = _by_doc(loaded, "LaMP-2")
    conflicting = agreeing = 0
    for s in loaded["LaMP-2"]["dev"]:
        info = entry["sample_info"][s.sample_id]
        want = manifest["communities"][str(info["community"])]["lamp2_tag"][info["topic"]]
        for doc_id, (u, d) in docs.items():
            if entry["doc_topic"][doc_id] != info["topic"] or u == s.user_id:
                continue
            if manifest["topic_group_of_user"][u] == manifest["topic_group_of_user"][s.user_id]:
                conflicting += d.fields["tag"] != want
                agreeing += d.fields["tag"] == want
        relevant = set(info["relevant_docs"])
        assert all(entry["community_of_user"][docs[d][0]] == info["community"] for d in relevant)
    assert conflicting > 2 * agreeing


def test_no_community_only_the_own_history_is_relevant(no_community: tuple) -> None:
    manifest, loaded = no_community
    for task in TASKS:
        entry = manifest["tasks"][task]
        of_user = entry["community_of_user"]
        assert len(set(of_user.values())) == len(of_user)  # no planted cluster structure: every user alone
        docs = _by_doc(loaded, task)
        for s in loaded[task]["dev"] + loaded[task]["train"]:
            info = entry["sample_info"][s.sample_id]
            assert info["own_topic_in_profile"] and info["relevant_docs"]
            assert {docs[d][0] for d in info["relevant_docs"]} == {s.user_id}


def test_no_community_other_users_labels_are_chance(no_community: tuple) -> None:
    """Other users' tags on the query's topic match the gold at about chance (1 of 15 tags), the own ones mostly."""
    manifest, loaded = no_community
    entry = manifest["tasks"]["LaMP-2"]
    docs = _by_doc(loaded, "LaMP-2")
    other, own = Counter(), Counter()
    for s in loaded["LaMP-2"]["dev"]:
        topic = entry["sample_info"][s.sample_id]["topic"]
        for doc_id, (u, d) in docs.items():
            if entry["doc_topic"][doc_id] == topic:
                (own if u == s.user_id else other)[d.fields["tag"] == s.gold] += 1
    assert other[True] / sum(other.values()) < 0.2 and own[True] / sum(own.values()) > 0.7


def test_default_family_is_byte_identical_to_demo_v2(tmp_path: Path) -> None:
    """The communities family writes exactly the files the generator wrote before families existed (digest taken
    from the pre-family code: users=12, communities=2, dev_samples=6, seed=1, every task, manifest included)."""
    import hashlib

    write_demo(tmp_path, users=12, communities=2, dev_samples=6, seed=1)
    digest = hashlib.sha256()
    for p in sorted(tmp_path.rglob("*.json")):
        digest.update(str(p.relative_to(tmp_path)).encode())
        digest.update(p.read_bytes())
    assert digest.hexdigest() == "b9dee195701988ab5673aedd9249f6a2c5770cdf52862b93e63e3729bd281d60"


def test_alike_communities_write_apart_but_label_alike(alike_communities: tuple) -> None:
    """The communities exist (each topic group writes about its own ring topics in its own style), but a document's
    label does not depend on its author's community: one tag (LaMP-2) and one rating (LaMP-3) per topic for everybody,
    noise flips aside, and every non-noisy document on the topic is relevant, whoever wrote it."""
    manifest, loaded = alike_communities
    group = manifest["topic_group_of_user"]
    assert len(set(group.values())) == 4 and set(manifest["tasks"]["LaMP-2"]["community_of_user"].values()) == {0}
    for task, field in (("LaMP-2", "tag"), ("LaMP-3", "score")):
        entry = manifest["tasks"][task]
        noisy = set(entry["noisy_docs"])
        labels: dict[str, set[str]] = {}
        groups: dict[str, set[int]] = {}
        for doc_id, (u, d) in _by_doc(loaded, task).items():
            topic = entry["doc_topic"][doc_id]
            groups.setdefault(topic, set()).add(group[u])
            if doc_id not in noisy:
                labels.setdefault(topic, set()).add(str(d.fields[field]))
        assert all(len(v) == 1 for v in labels.values()), labels  # one label per topic, whatever the community
        assert sum(len(g) > 1 for g in groups.values()) >= 4  # topics written about by two communities
        for s in loaded[task]["dev"]:
            info = entry["sample_info"][s.sample_id]
            on_topic = {d for d, t in entry["doc_topic"].items() if t == info["topic"] and d not in noisy}
            assert set(info["relevant_docs"]) == on_topic
    style_of = manifest["style_of_user"]
    assert all(style_of[u] == group[u] for u in group)  # the community still shows in how its users write


def test_tagging_items_recur_and_agreeing_users_write_identical_documents(tmp_path: Path) -> None:
    """The tagging family (prag_models/data/demo_tagging.py): a dev question's item was labelled by other users, users
    who gave it the same tag wrote the same text, and the relevant documents are the item's with the asker's tag."""
    manifest = write_demo(tmp_path, users=64, communities=4, dev_samples=32, tasks=("LaMP-2",), family="tagging")
    loaded = load_lamp_task(tmp_path, "LaMP-2")
    entry, items = manifest["tasks"]["LaMP-2"], manifest["items"]
    docs = _by_doc({"LaMP-2": loaded}, "LaMP-2")
    texts = Counter(d.text for _, d in docs.values())
    assert len(texts) < 0.6 * len(docs)  # identical documents: the same item, the same tag
    infos = [entry["sample_info"][s.sample_id] for s in loaded["dev"]]
    assert sum(i["item_documents"] > 0 for i in infos) >= 0.9 * len(infos)
    assert any(item["taste_tags"] for item in items.values()) and any(not item["taste_tags"] for item in items.values())
    for s, info in zip(loaded["dev"], infos, strict=True):
        item = items[info["item"]]
        planted = item["taste_tags"][info["community"]] if item["taste_tags"] else item["tag"]
        assert s.query == item["description"] and (info["noisy_label"] or s.gold == planted)
        assert all(entry["doc_item"][d] == info["item"] and docs[d][1].fields["tag"] == planted
                   for d in info["relevant_docs"])  # fmt: skip
        assert info["item"] not in {entry["doc_item"][d.doc_id] for d in s.profile}  # the next item is a new one
