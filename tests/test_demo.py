"""The embedded demo: deterministic, loadable, and carrying the planted collaborative structure."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from prag_models.data.demo import write_demo
from prag_models.data.lamp import LampSample, load_lamp_task, parse_date
from prag_models.data.tasks import TASKS


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, dict[str, list[LampSample]]]]:
    """The default demo written once, with every task loaded back."""
    root = tmp_path_factory.mktemp("demo")
    manifest = write_demo(root)
    loaded = {task: load_lamp_task(root, task) for task in TASKS}
    return root, manifest, loaded


def _files(root: Path) -> dict[str, bytes]:
    """Every file under root by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_and_manifest_file(demo: tuple) -> None:
    root, manifest, _ = demo
    for task in TASKS:
        for split in ("train", "dev"):
            folder = root / f"LaMP_{task[5:]}_time" / split
            assert (folder / f"{split}_questions.json").is_file() and (folder / f"{split}_outputs.json").is_file()
    assert json.loads((root / "demo_manifest.json").read_text(encoding="utf-8")) == json.loads(json.dumps(manifest))


def test_deterministic_byte_identical(tmp_path: Path) -> None:
    write_demo(tmp_path / "a", users=20, communities=4, dev_samples=8, seed=3)
    write_demo(tmp_path / "b", users=20, communities=4, dev_samples=8, seed=3)
    write_demo(tmp_path / "c", users=20, communities=4, dev_samples=8, seed=4)
    a, b, c = (_files(tmp_path / x) for x in "abc")
    assert a == b and len(a) == 6 * 4 + 1
    assert a != c


def test_task_subset_gives_same_task_files(tmp_path: Path) -> None:
    write_demo(tmp_path / "all", users=12, communities=3, dev_samples=6)
    write_demo(tmp_path / "one", users=12, communities=3, dev_samples=6, tasks=("lamp2",))
    one = {k: v for k, v in _files(tmp_path / "one").items() if k.startswith("LaMP_2_time")}
    assert one and all(_files(tmp_path / "all")[k] == v for k, v in one.items())


def test_loads_back_with_manifest_counts(demo: tuple) -> None:
    _, manifest, loaded = demo
    for task in TASKS:
        entry = manifest["tasks"][task]
        splits = loaded[task]
        assert {s: len(v) for s, v in splits.items()} == entry["samples"] == {"train": 48, "dev": 96}
        samples = splits["train"] + splits["dev"]
        users = {s.user_id for s in samples}
        assert users == set(entry["community_of_user"]) and len(users) == entry["users"] == 144
        assert len({s.sample_id for s in samples}) == len(samples)
        docs = {d.doc_id for s in samples for d in s.profile}
        assert len(docs) == entry["docs"] == sum(len(s.profile) for s in samples)
        assert all(s.gold is not None and s.query and s.user_id.startswith("u") for s in samples)
        for s in samples:
            thin = entry["thin_profile"][s.user_id]
            assert (2 <= len(s.profile) <= 4) if thin else (8 <= len(s.profile) <= 14)
            dates = [parse_date(d.date) for d in s.profile]
            assert all(d is not None for d in dates) and dates == sorted(dates)


def test_every_user_has_a_balanced_community(demo: tuple) -> None:
    _, manifest, loaded = demo
    for task in TASKS:
        of_user = manifest["tasks"][task]["community_of_user"]
        assert set(Counter(of_user.values()).values()) == {24}
        assert all(s.user_id in of_user for split in loaded[task].values() for s in split)


def test_texts_are_short(demo: tuple) -> None:
    _, _, loaded = demo
    for task in TASKS:
        lengths = [len(d.text.split()) for s in loaded[task]["dev"] for d in s.profile]
        low = 9 if task == "LaMP-7" else 20
        assert low <= min(lengths) and max(lengths) <= 70


def test_classification_gold_follows_community_preference(demo: tuple) -> None:
    _, manifest, loaded = demo
    for task, key in (("LaMP-2", "lamp2_tag"), ("LaMP-3", "lamp3_rating")):
        info = manifest["tasks"][task]["sample_info"]
        dev = loaded[task]["dev"]
        hits = [
            s.gold == str(manifest["communities"][str(info[s.sample_id]["community"])][key][info[s.sample_id]["topic"]])
            for s in dev
        ]
        assert sum(hits) / len(hits) >= 0.8


def test_topics_are_shared_and_the_community_decides_the_label(demo: tuple) -> None:
    """Every topic belongs to two communities, which give it different tags, ratings and key words."""
    _, manifest, _ = demo
    communities = manifest["communities"]
    owners: dict[str, list[str]] = {}
    for c, info in communities.items():
        for t in info["topics"]:
            owners.setdefault(t, []).append(c)
    assert set(map(len, owners.values())) == {2}
    for t, (a, b) in owners.items():
        ca, cb = communities[a], communities[b]
        assert ca["lamp2_tag"][t] != cb["lamp2_tag"][t]
        assert abs(ca["lamp3_rating"][t] - cb["lamp3_rating"][t]) >= 2
        assert set(ca["key_words"][t]).isdisjoint(cb["key_words"][t])


def test_half_of_the_users_have_thin_profiles(demo: tuple) -> None:
    _, manifest, _ = demo
    for entry in manifest["tasks"].values():
        share = sum(entry["thin_profile"].values()) / len(entry["thin_profile"])
        assert 0.35 <= share <= 0.65


def test_relevant_docs_are_same_community_same_topic_and_not_noisy(demo: tuple) -> None:
    _, manifest, loaded = demo
    for task in TASKS:
        entry = manifest["tasks"][task]
        author = {d.doc_id: s.user_id for split in loaded[task].values() for s in split for d in s.profile}
        noisy = set(entry["noisy_docs"])
        for sid, info in entry["sample_info"].items():
            relevant = set(info["relevant_docs"])
            expected = {
                d
                for d, t in entry["doc_topic"].items()
                if t == info["topic"] and entry["community_of_user"][author[d]] == info["community"] and d not in noisy
            }
            assert relevant == expected and relevant, sid


def test_queries_do_not_carry_the_community_style(demo: tuple) -> None:
    """The item a query describes is written neutrally: no community opener or closer appears in it."""
    from prag_models.data.demo_vocab import STYLES

    _, _, loaded = demo
    for task in ("LaMP-2", "LaMP-3", "LaMP-4", "LaMP-5"):
        for s in loaded[task]["dev"]:
            assert not any(opener in s.input or closer in s.input for opener, closer in STYLES), s.sample_id


def test_other_communities_on_the_topic_carry_a_conflicting_label(demo: tuple) -> None:
    """For every LaMP-2 query, docs of another community on the same topic exist and mostly carry another tag."""
    _, manifest, loaded = demo
    entry = manifest["tasks"]["LaMP-2"]
    docs = {d.doc_id: (s.user_id, d) for split in loaded["LaMP-2"].values() for s in split for d in s.profile}
    conflicting = 0
    for s in loaded["LaMP-2"]["dev"]:
        info = entry["sample_info"][s.sample_id]
        rivals = [
            d
            for doc_id, (u, d) in docs.items()
            if entry["doc_topic"][doc_id] == info["topic"] and entry["community_of_user"][u] != info["community"]
        ]
        assert rivals, s.sample_id
        tags = Counter(d.fields["tag"] for d in rivals)
        conflicting += (
            tags.most_common(1)[0][0] != manifest["communities"][str(info["community"])]["lamp2_tag"][info["topic"]]
        )
    assert conflicting == len(loaded["LaMP-2"]["dev"])


def test_about_half_of_queries_have_no_own_doc_on_the_topic(demo: tuple) -> None:
    _, manifest, loaded = demo
    for task in TASKS:
        entry = manifest["tasks"][task]
        for split in ("train", "dev"):
            samples = loaded[task][split]
            own = [
                any(entry["doc_topic"][d.doc_id] == entry["sample_info"][s.sample_id]["topic"] for d in s.profile)
                for s in samples
            ]
            assert own == [entry["sample_info"][s.sample_id]["own_topic_in_profile"] for s in samples]
            assert 0.4 <= 1 - sum(own) / len(own) <= 0.6


def test_same_community_users_carry_the_label(demo: tuple) -> None:
    """For every query, the majority label among same-community docs on its topic is the community preference."""
    _, manifest, loaded = demo
    for task, field, key in (("LaMP-2", "tag", "lamp2_tag"), ("LaMP-3", "score", "lamp3_rating")):
        entry = manifest["tasks"][task]
        samples = loaded[task]["train"] + loaded[task]["dev"]
        profile_of = {s.user_id: s.profile for s in samples}
        for s in loaded[task]["dev"]:
            info = entry["sample_info"][s.sample_id]
            mates = [u for u, c in entry["community_of_user"].items() if c == info["community"] and u != s.user_id]
            on_topic = [d for u in mates for d in profile_of[u] if entry["doc_topic"][d.doc_id] == info["topic"]]
            labels = [d.fields[field] for d in on_topic]
            assert labels, s.sample_id
            majority = Counter(labels).most_common(1)[0][0]
            assert majority == str(manifest["communities"][str(info["community"])][key][info["topic"]])


def test_lamp1_gold_reference_is_a_community_mates_paper(demo: tuple) -> None:
    _, manifest, loaded = demo
    entry = manifest["tasks"]["LaMP-1"]
    samples = loaded["LaMP-1"]["train"] + loaded["LaMP-1"]["dev"]
    profile_of = {s.user_id: s.profile for s in samples}
    positions = Counter()
    for s in samples:
        info = entry["sample_info"][s.sample_id]
        refs = s.input.split('[1]: "')[1].split('" [2]: "')
        refs = [refs[0], refs[1].rstrip('"')]
        gold, distractor = (refs[0], refs[1]) if s.gold == "[1]" else (refs[1], refs[0])
        positions[s.gold] += 1
        mates = [u for u, c in entry["community_of_user"].items() if c == info["community"] and u != s.user_id]
        on_topic = [d for u in mates for d in profile_of[u] if entry["doc_topic"][d.doc_id] == info["topic"]]
        assert gold in {d.fields["title"] for d in on_topic}
        assert gold not in {d.fields["title"] for d in s.profile}
        others = [u for u, c in entry["community_of_user"].items() if c != info["community"]]
        rival_titles = {
            d.fields["title"] for u in others for d in profile_of[u] if entry["doc_topic"][d.doc_id] == info["topic"]
        }
        assert distractor in rival_titles  # another community's paper on the SAME topic
    assert positions["[1]"] >= 48 and positions["[2]"] >= 48


def test_generation_golds_reuse_community_topic_key_words(demo: tuple) -> None:
    _, manifest, loaded = demo
    for task in ("LaMP-4", "LaMP-5", "LaMP-7"):
        entry = manifest["tasks"][task]
        for s in loaded[task]["dev"]:
            info = entry["sample_info"][s.sample_id]
            a, b = manifest["communities"][str(info["community"])]["key_words"][info["topic"]]
            assert a in s.gold and b in s.gold


def test_small_world_and_explicit_train_size(tmp_path: Path) -> None:
    manifest = write_demo(tmp_path, users=10, communities=2, dev_samples=4, train_samples=9, tasks=("LaMP-1", "LaMP-7"))
    loaded = load_lamp_task(tmp_path, "LaMP-7")
    assert len(loaded["dev"]) == 4 and len(loaded["train"]) == 9
    assert set(manifest["tasks"]) == {"LaMP-1", "LaMP-7"}
    assert {s.user_id for s in loaded["dev"]}.isdisjoint({s.user_id for s in loaded["train"]})
    assert len(load_lamp_task(tmp_path, "LaMP-1")["train"]) == 9


@pytest.mark.parametrize(
    "kwargs",
    [
        {"communities": 0},
        {"communities": 9},
        {"users": 3, "communities": 4},
        {"dev_samples": 145},
        {"train_samples": -1},
    ],
)
def test_invalid_arguments(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        write_demo(tmp_path, **kwargs)
