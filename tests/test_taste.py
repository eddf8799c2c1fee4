"""Taste similarity (prag_models/users/taste.py): neighbours by how users label similar items, and the pool quality
the users assets record (pool precision, ARI)."""

from __future__ import annotations

import dagster as dg
import numpy as np
import pytest
from conftest import materialize_graph, partition_metadata, write_config

from prag_models.config.settings import ConfigError, load_settings
from prag_models.users.pool_quality import adjusted_rand, cluster_pool_precision, neighbour_pool_precision
from prag_models.users.taste import LabelledDocs, combine, rating_vectors, tag_vectors, taste_vectors

#: Hand-built users: (topic, tag) of each document. A and B share a taste (X is "a") but B writes mostly about Z;
#: C writes about exactly A's topics but judges them differently; D and E fill the item clusters.
USERS = {
    "A": [("X", "a"), ("X", "a"), ("X", "a"), ("Y", "b")],
    "B": [("X", "a"), ("Z", "c"), ("Z", "c"), ("Z", "c")],
    "C": [("X", "z"), ("X", "z"), ("X", "z"), ("Y", "y")],
    "D": [("X", "z"), ("Z", "c"), ("Y", "b")],
    "E": [("Y", "b"), ("Z", "q"), ("X", "a")],
}
AXES = {"X": 0, "Y": 1, "Z": 2}


def _table(seed: int = 0) -> tuple[list[str], LabelledDocs, np.ndarray]:
    """Users, their labelled documents (item embedding = topic axis + small noise) and mean content vectors."""
    rng = np.random.default_rng(seed)
    ids = sorted(USERS)
    owner, items, tags = [], [], []
    for row, user in enumerate(ids):
        for topic, tag in USERS[user]:
            v = np.zeros(8)
            v[AXES[topic]] = 1.0
            v[3:] = rng.normal(0, 0.05, 5)
            owner.append(row)
            items.append(v / np.linalg.norm(v))
            tags.append(tag)
    items_arr = np.asarray(items)
    owners = np.asarray(owner)
    content = np.stack([items_arr[owners == r].mean(axis=0) for r in range(len(ids))])
    return ids, LabelledDocs(owners, items_arr, tag_vectors(tags)), content


def _ranking(vectors: np.ndarray, ids: list[str], user: str) -> list[str]:
    """Other users by decreasing cosine to user."""
    x = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    sims = x @ x[ids.index(user)]
    return [ids[i] for i in np.argsort(-sims, kind="stable") if ids[i] != user]


def test_taste_ranks_same_taste_above_same_topic_other_taste() -> None:
    ids, docs, content = _table()
    taste = taste_vectors(docs, len(ids), k=3)
    by_content = _ranking(combine(content, taste, "content", 0.5), ids, "A")
    assert by_content.index("C") < by_content.index("B")  # content: C writes about what A writes about
    for mode in ("taste", "blend"):
        ranked = _ranking(combine(content, taste, mode, 0.5), ids, "A")
        assert ranked.index("B") < ranked.index("C"), mode
    t = taste / np.maximum(np.linalg.norm(taste, axis=1, keepdims=True), 1e-12)
    assert t[ids.index("A")] @ t[ids.index("C")] < 0 < t[ids.index("A")] @ t[ids.index("B")]


def test_blend_is_the_weighted_cosine_and_users_without_labels_keep_content() -> None:
    ids, docs, content = _table()
    taste = taste_vectors(docs, len(ids), k=3)
    taste[ids.index("E")] = 0.0  # E without labelled documents
    blend = combine(content, taste, "blend", 0.3)
    c = combine(content, taste, "content", 0.3)
    a, b = ids.index("A"), ids.index("B")
    assert blend[a] @ blend[b] == pytest.approx(0.7 * (c[a] @ c[b]) + 0.3 * (taste[a] @ taste[b]), abs=1e-5)
    e = ids.index("E")
    assert np.linalg.norm(blend[e]) == pytest.approx(1.0) and np.allclose(blend[e, : c.shape[1]], c[e])


def test_rating_vectors_prefer_near_scores() -> None:
    v = rating_vectors(["5", "4", "1"])
    assert v[0] @ v[1] > v[0] @ v[2]


def test_pool_precision_and_ari_on_known_pools() -> None:
    planted = {"a": 0, "b": 0, "c": 1, "d": 1}
    n_docs = {"a": 2, "b": 2, "c": 2, "d": 6}
    pools = {"a": ["b", "c"], "c": ["d"]}
    assert neighbour_pool_precision(pools, n_docs, planted) == pytest.approx((0.5 + 1) / 2, abs=1e-4)
    ids = ["a", "b", "c", "d"]
    assert cluster_pool_precision(ids, [0, 0, 0, 1], n_docs, planted) == pytest.approx((0.5 + 0.5 + 0) / 3, abs=1e-4)
    assert adjusted_rand(ids, [5, 5, 7, 7], planted) == 1.0


def test_user_similarity_setting_is_validated(tmp_path) -> None:
    with pytest.raises(ConfigError, match="user_similarity"):
        load_settings(environ={"PRAG__CLUSTERING__USER_SIMILARITY": "vibes"}, home=str(tmp_path))
    with pytest.raises(ConfigError, match="taste_weight"):
        load_settings(environ={"PRAG__CLUSTERING__TASTE_WEIGHT": "1.5"}, home=str(tmp_path))


def _metadata(result, asset: str) -> dict:
    return partition_metadata(result, asset)


@pytest.mark.parametrize("task", ["LaMP-2", "LaMP-4"])
def test_users_assets_record_pool_precision_and_ari_with_taste(tmp_path, task: str) -> None:
    """On a split_taste world the users assets' metadata carry ARI and pool precision; taste is what was used."""
    data = {"demo_users": 24, "demo_communities": 2, "demo_dev_samples": 6, "tasks": [task]}
    data["demo_family"] = "split_taste"
    config = write_config(
        tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake", data=data,
        clustering={"similar_users": 2, "user_similarity": "taste"}, cfrag={"epochs": 5},
    )  # fmt: skip
    selection = dg.AssetSelection.assets("similar_users", "cfrag_similar_users").upstream()
    result = materialize_graph(config, [task], selection=selection)
    clusters = _metadata(result, "user_clusters")[task]
    assert clusters["user_similarity"] == "taste" and clusters["users_with_taste"] == 24
    assert -1 <= clusters["adjusted_rand_vs_planted"] <= 1 and 0 <= clusters["cluster_pool_precision"] <= 1
    similar = _metadata(result, "similar_users")[task]
    assert 0 <= similar["neighbour_pool_precision"] <= 1
    cfrag = _metadata(result, "cfrag_similar_users")[task]
    assert cfrag["user_similarity"] == "taste" and 0 <= cfrag["pool_precision"] <= 1


def test_incremental_assignment_refuses_vectors_of_another_space() -> None:
    """A clustering fitted on blended vectors cannot place content-only vectors: a clear error, not a crash."""
    from prag_models.users.clustering import assign_new_users, cluster_users

    ids, docs, content = _table()
    blend = combine(content, taste_vectors(docs, len(ids), k=3), "blend", 0.5)
    fit = cluster_users(np.vstack([blend] * 3), "kmeans", kmeans_k=2)
    with pytest.raises(ValueError, match="user_similarity"):
        assign_new_users(fit, content)
    assert len(assign_new_users(fit, blend)) == len(ids)


def _neighbours_and_clusters(config, home) -> tuple[dict[str, list[str]], dict[str, frozenset[str]]]:
    """Run the users group under a config; each user's neighbours (rank order) and the members of its cluster."""
    import duckdb

    users_group = ["user_embeddings", "user_clusters", "similar_users"]
    assert materialize_graph(config, ["LaMP-2"], selection=users_group).success
    with duckdb.connect(str(home / "prag.duckdb"), read_only=True) as con:
        pairs = con.execute("SELECT user_id, neighbour_id FROM similar_users ORDER BY user_id, rank").fetchall()
        clusters = dict(con.execute("SELECT user_id, cluster FROM user_clusters").fetchall())
    neighbours: dict[str, list[str]] = {}
    for user, nb in pairs:
        neighbours.setdefault(user, []).append(nb)
    members = {u: frozenset(v for v, c in clusters.items() if c == clusters[u]) for u in clusters}
    return neighbours, members


def _relabel_hidden(con, hidden: set[tuple[str, str]]) -> None:
    """Give every hidden document another of the task's tags (the next one in sorted order)."""
    import json

    rows = con.execute("SELECT user_id, doc_id, fields_json FROM profile_documents WHERE task = 'LaMP-2'").fetchall()
    tags = sorted({json.loads(f)["tag"] for _, _, f in rows})
    for user, doc, fields in rows:
        if (user, doc) in hidden:
            f = json.loads(fields)
            f["tag"] = tags[(tags.index(f["tag"]) + 1) % len(tags)]
            con.execute("UPDATE profile_documents SET fields_json = ? WHERE task = 'LaMP-2' AND user_id = ? "
                        "AND doc_id = ?", [json.dumps(f), user, doc])  # fmt: skip


def test_documents_others_may_not_see_shape_no_other_users_neighbours(tmp_path) -> None:
    """docs/privacy.md, issue 39: a fifth of the users opted out and every second document of three others private;
    relabelling only those documents changes no other user's clusters or neighbours under content, taste and blend
    (taste read every document's label: every user's taste vector moved with the centring)."""
    import duckdb

    from prag_models.privacy.rules import opted_out_users, shareable_flags
    from prag_models.users.taste import similarity_vectors

    home, task = tmp_path / "home", "LaMP-2"
    base = write_config(tmp_path / "prag.toml", home, generator_backend="fake", data={"tasks": [task]})
    embedded = dg.AssetSelection.assets("document_embeddings", "query_embeddings").upstream()
    assert materialize_graph(base, [task], selection=embedded).success
    with duckdb.connect(str(home / "prag.duckdb")) as con:
        users = [u for (u,) in con.execute("SELECT DISTINCT user_id FROM profile_documents ORDER BY 1").fetchall()]
        opted = opted_out_users(users, 0.2, seed=3)
        con.execute("UPDATE user_sharing SET share = false WHERE user_id IN (SELECT unnest(?))", [sorted(opted)])
        docs = con.execute("SELECT user_id, doc_id, position FROM profile_documents ORDER BY user_id, position").df()
        private = docs[docs["user_id"].isin(sorted(set(users) - opted)[:3]) & (docs["position"] % 2 == 0)]
        con.executemany("INSERT INTO document_visibility VALUES (?, ?, ?, 'private')",
                        [[task, u, d] for u, d in zip(private["user_id"], private["doc_id"], strict=True)])  # fmt: skip
        flags = shareable_flags(con, task, docs["user_id"].tolist(), docs["doc_id"].tolist(), default_share=True)
    hidden = {(u, d) for u, d, f in zip(docs["user_id"], docs["doc_id"], flags, strict=True) if not f}
    owners = {u for u, _ in hidden}
    assert len(opted) == 3 and len(owners) == 6 and len(hidden) < len(docs)
    configs = {mode: write_config(tmp_path / f"{mode}.toml", home, generator_backend="fake", data={"tasks": [task]},
                                  clustering={"similar_users": 2, "user_similarity": mode})
               for mode in ("content", "taste", "blend")}  # fmt: skip
    before = {mode: _neighbours_and_clusters(config, home) for mode, config in configs.items()}
    everything = load_settings(configs["taste"])
    with duckdb.connect(str(home / "prag.duckdb")) as con:
        ids = [u for (u,) in con.execute("SELECT user_id FROM user_embeddings ORDER BY user_id").fetchall()]
        content = np.ones((len(ids), 2), dtype=np.float32)
        all_docs = lambda u, d: np.ones(len(u), dtype=bool)  # noqa: E731 - teeth: a rule that shares everything
        unfiltered = similarity_vectors(con, task, everything, ids, content, all_docs)[0]
        _relabel_hidden(con, hidden)
        moved = similarity_vectors(con, task, everything, ids, content, all_docs)[0]
    others = [i for i, u in enumerate(ids) if u not in owners]
    assert not np.allclose(unfiltered[others], moved[others]), "the relabelling would move nobody: no teeth"
    for mode, config in configs.items():
        neighbours, members = _neighbours_and_clusters(config, home)
        changed = [u for u in ids if u not in owners and (neighbours.get(u) != before[mode][0].get(u)
                                                         or members[u] != before[mode][1][u])]  # fmt: skip
        assert changed == [], f"{mode}: {len(changed)} of {len(ids) - len(owners)} other users changed: {changed}"
