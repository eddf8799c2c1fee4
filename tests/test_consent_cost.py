"""The consent-cost rows (docs/privacy.md "What consent costs") compare like with like: the same tuned knobs as the
full-consent row, and z_u, clusters and neighbours computed without the opted-out users' documents."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import EVALUATED_TASK, store_copy

from prag_models.config.settings import Settings, load_settings
from prag_models.methods.knobs import with_knobs
from prag_models.privacy.rules import opted_out_users
from prag_models.stages.retrieval import CLUSTERRAG_METHODS, clusterrag_rows
from prag_models.stages.table_rules import retrieval_extra
from prag_models.stages.users import similar_user_rows, user_cluster_rows, user_embedding_rows
from prag_models.storage.store import replace_many

TASK = EVALUATED_TASK
KEY = ["sample_id", "rank"]
COLUMNS = ["user_id", "doc_id", "source_user_id", "score"]


def _settings(config, share: float, similarity: str = "content") -> Settings:
    """The graph's settings with this consent-cost share (every ClusterRAG method priced) and user similarity."""
    settings = load_settings(config)
    privacy = {"privacy.consent_cost_share": share, "privacy.consent_cost_methods": CLUSTERRAG_METHODS}
    return with_knobs(settings, {**privacy, "clustering.user_similarity": similarity})


def _opted_out(con, settings: Settings) -> list[str]:
    """The users the scenario opts out: a seeded share of the users with documents (privacy.rules)."""
    users = [u for (u,) in con.execute("SELECT DISTINCT user_id FROM document_embeddings WHERE task = ?", [TASK])
             .fetchall()]  # fmt: skip
    p = settings.privacy
    return sorted(opted_out_users(users, p.consent_cost_share, p.consent_cost_seed))


def _tune(con, similarity: str = "content") -> None:
    """Tuned values that differ from the defaults (1 neighbour; a larger minimum cluster size, the whole cluster)."""
    con.execute("DELETE FROM tuned_settings")
    values = [("clusterrag_collaborative", "clustering.similar_users", 1),
              ("clusterrag_collaborative", "clustering.user_similarity", similarity),
              ("clusterrag_community", "clustering.min_cluster_size", 8),
              ("clusterrag_community", "clustering.community_top_n", 0),
              ("clusterrag_community", "clustering.community_user_weight", 1.0),
              ("clusterrag_community", "clustering.user_similarity", similarity)]  # fmt: skip
    for method, knob, value in values:
        con.execute("INSERT INTO tuned_settings (task, method, knob, value) VALUES (?, ?, ?, ?)",
                    [TASK, method, knob, json.dumps(value)])  # fmt: skip


def _rows(frame: pd.DataFrame, method: str) -> pd.DataFrame:
    """One method's rows in a fixed order, without the method column."""
    return frame[frame["method"] == method].sort_values(KEY)[KEY + COLUMNS].reset_index(drop=True)


def test_with_nobody_opted_out_the_consent_rows_are_the_tuned_full_rows(evaluated_graph, tmp_path) -> None:
    """A consent scenario that opts nobody out (a share that rounds to no user) gives every ClusterRAG method exactly
    its full-consent rows, tuned ones included: the difference between the two rows is consent, not tuning."""
    config, home, _ = evaluated_graph
    settings = _settings(config, share=0.001)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        _tune(con)
        assert _opted_out(con, settings) == []
        frame, stats = clusterrag_rows(con, TASK, settings)
    assert set(stats["tuned"]) == {"clusterrag_collaborative", "clusterrag_community"}
    assert stats["consent_cost"]["opted_out_users"] == 0
    for method in CLUSTERRAG_METHODS:
        full, consent = _rows(frame, method), _rows(frame, f"{method}@consent100")
        assert len(full) and len(consent) == len(full), method
        pd.testing.assert_frame_equal(consent, full, obj=method)
    # the untuned rows differ where tuning moved a knob (the comparison above is not vacuous)
    assert not _rows(frame, "clusterrag_collaborative@default").equals(_rows(frame, "clusterrag_collaborative"))


def _rebuild_users(con, settings: Settings) -> None:
    """What the graph's users group writes (z_u, clusters, similar users), from the documents as they are now."""
    for name, build in (("user_embeddings", lambda: user_embedding_rows(con, TASK, settings.privacy.default_share)),
                        ("user_clusters", lambda: user_cluster_rows(con, TASK, settings)),
                        ("similar_users", lambda: similar_user_rows(con, TASK, settings))):  # fmt: skip
        replace_many(con, [(name, build()[0], {"task": TASK})])


def _rewrite_documents(con, users: list[str]) -> None:
    """Change what the given users' documents say: each embedding mirrored, each LaMP-2 tag another tag."""
    docs = con.execute("SELECT user_id, doc_id, fields_json FROM profile_documents WHERE task = ? AND user_id IN "
                       f"({', '.join('?' * len(users))})", [TASK, *users]).fetchall()  # fmt: skip
    tags = sorted({json.loads(f)["tag"] for _, _, f in con.execute(
        "SELECT user_id, doc_id, fields_json FROM profile_documents WHERE task = ?", [TASK]).fetchall()})  # fmt: skip
    for user, doc, fields in docs:
        value = json.loads(fields)
        value["tag"] = tags[(tags.index(value["tag"]) + 1) % len(tags)]
        con.execute("UPDATE profile_documents SET fields_json = ? WHERE task = ? AND user_id = ? AND doc_id = ?",
                    [json.dumps(value), TASK, user, doc])  # fmt: skip
        con.execute("UPDATE document_embeddings SET embedding = list_transform(embedding, lambda x: -x) "
                    "WHERE task = ? AND user_id = ? AND doc_id = ?", [TASK, user, doc])  # fmt: skip


@pytest.mark.parametrize("similarity", ["content", "taste"])
def test_opted_out_users_documents_do_not_shape_the_consent_rows(evaluated_graph, tmp_path, similarity) -> None:
    """Rewriting only the opted-out users' documents (vectors and labels) and rebuilding the users tables as the graph
    would changes the full-consent neighbours, but no consent-cost row of a user who still shares, nor the consent
    scenario's neighbours and clusters; the retrieval check accepts the consent rows."""
    config, home, _ = evaluated_graph
    settings = _settings(config, share=0.5, similarity=similarity)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        _tune(con, similarity)
        out = _opted_out(con, settings)
        _rebuild_users(con, settings)
        stored = con.execute("SELECT * FROM similar_users WHERE task = ? ORDER BY ALL", [TASK]).fetchall()
        before_frame, _ = clusterrag_rows(con, TASK, settings)
        _rewrite_documents(con, out)
        _rebuild_users(con, settings)
        assert stored != con.execute("SELECT * FROM similar_users WHERE task = ? ORDER BY ALL", [TASK]).fetchall()
        after_frame, _ = clusterrag_rows(con, TASK, settings)
    assert len(out) == 24
    for method in CLUSTERRAG_METHODS:
        name = f"{method}@consent50"
        a, b = (f[(f["method"] == name) & ~f["user_id"].isin(out)] for f in (before_frame, after_frame))
        a, b = (x.sort_values(KEY)[KEY + COLUMNS].reset_index(drop=True) for x in (a, b))
        assert len(a), name
        pd.testing.assert_frame_equal(a, b, obj=name)
        assert not (b["source_user_id"].isin(out) & (b["source_user_id"] != b["user_id"])).any()
    assert np.isfinite(after_frame["score"]).all()


@pytest.mark.parametrize("similarity", ["content", "taste"])
def test_the_consent_scenarios_neighbours_and_clusters_ignore_the_opted_out_documents(
    evaluated_graph, tmp_path, similarity
) -> None:
    """The consent scenario's users (stages/consent_cost.consent_space): rewriting the opted-out users' documents
    changes no neighbour list of a user who shares and no cluster; the retrieval check judges the consent rows by
    them (and accepts them)."""
    from prag_models.stages.consent_cost import consent_space, task_opted_out

    config, home, _ = evaluated_graph
    settings = _settings(config, share=0.5, similarity=similarity)
    with store_copy(home / "prag.duckdb", tmp_path) as con:
        _tune(con, similarity)
        out = task_opted_out(con, TASK, settings)
        assert out == _opted_out(con, settings)
        tuned = with_knobs(settings, {"clustering.similar_users": 1, "clustering.min_cluster_size": 8})
        spaces = []
        for rewrite in (False, True):
            if rewrite:
                _rewrite_documents(con, out)
            space = consent_space(con, TASK, settings, out)
            spaces.append([space.neighbours(settings), space.neighbours(tuned), space.groups(settings),
                           space.groups(tuned)])  # fmt: skip
        _rebuild_users(con, settings)
        frame, _ = clusterrag_rows(con, TASK, settings)
        con.execute("DELETE FROM clusterrag_retrievals WHERE task = ?", [TASK])
        con.execute("INSERT INTO clusterrag_retrievals BY NAME SELECT * FROM frame")
        problems = retrieval_extra("clusterrag_retrievals")(con, TASK, frame, settings)
        mine = frame[(frame["method"] == "clusterrag_collaborative@consent50") & ~frame["user_id"].isin(out)]
        moved = mine.head(1).assign(source_user_id=out[0])
        refused = retrieval_extra("clusterrag_retrievals")(con, TASK, pd.concat([frame, moved]), settings)
    for before, after in zip(*spaces, strict=True):
        if isinstance(next(iter(before.values())), list):  # neighbour lists: those of the users who share
            before, after = ({u: v for u, v in x.items() if u not in out} for x in (before, after))
        assert before and before == after
    assert problems == [], problems
    assert any("opted-out user" in p for p in refused), refused
