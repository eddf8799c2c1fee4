"""Non-interference on the whole graph (docs/privacy.md, issue 51): two tiny LaMP-2 worlds that differ only in documents
others may not see — every hidden document rewritten and relabelled, one added and one removed for an opted-out user
and for a user with private documents — give every other user identical rows in every table the graph writes and
identical served answers (the MLflow pyfunc and `prag answer`).

The tables compared are every table of the DuckDB file (a new table is compared by default) except the commented
EXCLUDED ones; rows of the owners of hidden documents are left out (by user_id, or by the asker of a sample_id); floats
agree to table_diff.TOLERANCE. Focused checks of the fixes the whole graph does not pin run on the first world."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from conftest import materialize_graph, store_copy, write_config

from prag_models.config.settings import Settings, load_settings
from prag_models.data.source import demo_root
from prag_models.data.tasks import LAMP2_TAGS
from privacy.helpers import edit_questions
from privacy.table_diff import VOLATILE, differences, keyed_differences

pytestmark = pytest.mark.models  # materializes the graph with the real embedder (the fast tier leaves it out)

TASK = "LaMP-2"
USERS = 20
# each user has one sample, dev or train: 8 dev samples (about 5 of other users) and 12 train samples
DATA = {"tasks": [TASK], "demo_users": USERS, "demo_dev_samples": 8}
CFRAG = {"epochs": 2, "reranker_layers": 1, "reranker_max_length": 64}
# ClusterRAG's and CFRAG's searches on; a count of trials, not seconds, ends each (time would make runs differ)
TUNING = {"enabled": True, "budget_s": 600.0, "max_trials": 6}
# The embedder as configured by default ("auto": ONNX Runtime on a CPU, one text a run, so that a vector is its text's
# alone: batched, padding moved a vector by ~1e-7 with the lengths of the texts beside it, a hidden document's among
# them, enough to swap two near-tied documents). PRAG_TEST_EMBEDDER_BACKEND runs another backend through the test.
EMBEDDER = {"backend": os.environ.get("PRAG_TEST_EMBEDDER_BACKEND", "auto")}
#: dense_global searches an IVF index here (the world's 100-odd shareable documents are above ann_above), so that its
#: search under the visibility mask is compared too, not only exact search. (Its training on shareable rows only is
#: tested in test_shared_view.py: in a world this small, training it on every row changed no other user's top 3.)
RETRIEVAL = {"ann_above": 32, "ann_nprobe": 2}

#: Tables not compared, and why; every other table of the file is. Timings, run ids and paths are columns
#: (VOLATILE), the owners' own rows are left out by row: what remains here are aggregates over every sample.
EXCLUDED = {
    # means and intervals over every dev sample, the owners' own included (whose own retrieval rightly shows their
    # hidden documents); the rows per sample they are computed from are compared (generations, llm_utility,
    # lamp_retrieval_sample_scores)
    "lamp_evaluation": "aggregate over every sample",
    "lamp_evaluation_comparisons": "aggregate over every sample",
    "lamp_retrieval_evaluation": "aggregate over every sample",
    "lamp_retrieval_comparisons": "aggregate over every sample",
    # the label-free test's plan: the challenger chosen on every pilot sample, the owners' own included, and the
    # measured seconds per prompt
    "llm_utility_plans": "aggregate over every sample, timings",
}
#: Caches keyed by content (one vector or answer per text, read by whoever has that text): an entry both worlds hold
#: is compared; an entry only one holds must be of an owner's hidden text or an owner's own prompt.
CONTENT_KEYED = {"embedding_cache": ["model_id", "content_hash"],
                 "generation_cache": ["generator_id", "prompt_hash", "max_new_tokens"]}  # fmt: skip
#: Which methods the label-free test scores per sample is the plan's choice (excluded above): its rows are compared
#: where both worlds scored the method, and must be the same rows when both plans chose alike.
PLAN_KEYED = {"llm_utility": ["task", "method", "sample_id", "phase"]}


#: Tables the comparison must reach (the retrievals of every method, neighbours, clusters, tuned knobs, feedback
#: labels, the trained models, the evaluation's rows per sample, the caches).
CORE = ("clusterrag_retrievals", "cfrag_retrievals", "baseline_retrievals", "pbr_lamp_retrievals", "similar_users",
        "cfrag_similar_users", "user_clusters", "user_embeddings", "cfrag_user_embeddings", "tuned_settings",
        "cfrag_tuned_settings", "feedback_labels", "cfrag_models", "cluster_models", "lamp_retrieval_sample_scores",
        "generations", "llm_utility", "embedding_cache", "generation_cache")  # fmt: skip


def _role(user: str) -> str | None:
    """u%5 == 0 does not share (u0000 by its record, the others by sharing.json); u%5 == 1 makes its even-numbered
    documents private (u0001 by the record field, the others by sharing.json); anyone else hides nothing."""
    return {0: "opted_out", 1: "private"}.get(int(user[1:]) % 5)


def _make_private(doc: dict, user: str, side: dict) -> None:
    """u0001's documents by the record field, the others' in sharing.json."""
    if user == "u0001":
        doc["visibility"] = "private"
    elif {"user_id": user, "id": str(doc["id"])} not in side["private_documents"]:
        side["private_documents"].append({"user_id": user, "id": str(doc["id"])})


def _plant(root: Path, variant: bool) -> dict[str, set[str]]:
    """Plant the hidden documents (and, in the variant world, change only them); returns owner -> hidden doc ids."""
    hidden: dict[str, set[str]] = {}

    def edit(q: dict, side: dict) -> None:
        user, role = q["user_id"], _role(q["user_id"])
        if role is None:
            return
        if role == "opted_out" and user == "u0000":
            q["share"] = False
        elif role == "opted_out":
            side["users"][user] = {"share": False}
        kept = []
        for doc in q["profile"]:
            if role == "private" and int(doc["id"]) % 2:
                kept.append(doc)
                continue
            if role == "private":
                _make_private(doc, user, side)
            if variant and int(doc["id"]) % 7 == 0:
                continue  # removed
            if variant:
                doc["description"] = f"an entirely different text {doc['id']} written for the variant world"
                doc["tag"] = LAMP2_TAGS[(LAMP2_TAGS.index(doc["tag"]) + 1) % len(LAMP2_TAGS)]
            hidden.setdefault(user, set()).add(str(doc["id"]))
            kept.append(doc)
        if variant:
            added = {"id": f"9{user[1:]}", "date": q["profile"][-1]["date"], "tag": LAMP2_TAGS[0],
                     "description": f"a document added to {user}'s hidden ones"}  # fmt: skip
            if role == "private":
                _make_private(added, user, side)
            kept.append(added)
            hidden.setdefault(user, set()).add(added["id"])
        q["profile"] = kept

    edit_questions(root, edit)
    return hidden


@dataclass(frozen=True)
class World:
    """One materialized world: its config, settings, hidden documents and how long the graph took."""

    config: Path
    settings: Settings
    hidden: dict[str, set[str]]
    seconds: float

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection to the world's DuckDB file."""
        return duckdb.connect(str(self.settings.duckdb_path), read_only=True)


def _build(root: Path, variant: bool) -> World:
    root.mkdir(parents=True)
    config = write_config(root / "prag.toml", root / "home", generator_backend="fake", data=DATA, cfrag=CFRAG,
                          tuning=TUNING, embedder=EMBEDDER, retrieval=RETRIEVAL)  # fmt: skip
    settings = load_settings(config)
    hidden = _plant(demo_root(settings), variant)
    started = time.perf_counter()
    assert materialize_graph(config, [TASK]).success
    return World(config, settings, hidden, time.perf_counter() - started)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> tuple[World, World]:
    """The original world and the variant (hidden documents rewritten, relabelled, added and removed)."""
    tmp = tmp_path_factory.mktemp("non-interference")
    return _build(tmp / "original", False), _build(tmp / "variant", True)


def _owners(a: World, b: World) -> set[str]:
    """Every user with a document others may not see, in either world."""
    return set(a.hidden) | set(b.hidden)


def _table(con, table: str, owners: set[str]) -> pd.DataFrame:
    """A table's rows of the other users (by user_id, else by the asker of sample_id), volatile columns dropped."""
    frame = con.execute(f'SELECT * FROM "{table}"').df()
    frame = frame.drop(columns=[c for c in frame.columns if VOLATILE.search(c)])
    if "user_id" in frame.columns:
        return frame[~frame["user_id"].isin(owners)]
    if "sample_id" in frame.columns:
        asker = dict(con.execute("SELECT sample_id, user_id FROM lamp_samples").fetchall())
        return frame[~frame["sample_id"].map(asker).isin(owners)]
    return frame


def _owned_only(con, table: str, keys: set, owners: set[str]) -> list[str]:
    """Of keys a cache holds in one world only, those that are not an owner's text or an owner's own prompt."""
    if table == "embedding_cache":
        others = {h for (h,) in con.execute(
            "SELECT content_hash FROM profile_documents WHERE NOT list_contains(?, user_id) UNION "
            "SELECT content_hash FROM query_embeddings WHERE NOT list_contains(?, user_id)",
            [sorted(owners)] * 2).fetchall()}  # fmt: skip
        return [f"{table}: {k} is another user's text" for k in keys if k[1] in others]
    asked = con.execute("SELECT input, query, user_id FROM lamp_samples").fetchall()
    prompts = dict(con.execute("SELECT prompt_hash, prompt FROM generation_cache").fetchall())
    bad = []
    for key in keys:
        prompt = prompts.get(key[1]) or ""
        if not any(u in owners and (i in prompt or q in prompt) for i, q, u in asked):
            bad.append(f"{table}: {key[1][:12]} is no owner's prompt")
    return bad


def compare_tables(a: World, b: World) -> tuple[list[str], list[str]]:
    """(the tables compared, every difference found in the other users' rows)."""
    owners = _owners(a, b)
    with a.connect() as ca, b.connect() as cb:
        names = [{t for (t,) in c.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'")
                  .fetchall()} for c in (ca, cb)]  # fmt: skip
        found = [f"table {t} in one world only" for t in sorted(names[0] ^ names[1])]
        compared = sorted((names[0] & names[1]) - set(EXCLUDED))
        for table in compared:
            fa, fb = _table(ca, table, owners), _table(cb, table, owners)
            if table in CONTENT_KEYED:
                diff, only_a, only_b = keyed_differences(table, fa, fb, CONTENT_KEYED[table])
                found += diff + _owned_only(ca, table, only_a, owners) + _owned_only(cb, table, only_b, owners)
            elif table in PLAN_KEYED:
                diff, only_a, only_b = keyed_differences(table, fa, fb, PLAN_KEYED[table])
                chosen = [c.execute("SELECT chosen FROM llm_utility_plans").fetchall() for c in (ca, cb)]
                found += diff + ([f"{table}: scored rows differ under the same plan"]
                                 if (only_a or only_b) and chosen[0] == chosen[1] else [])  # fmt: skip
            else:
                found += differences(table, fa, fb)
    return compared, found


def _requests(world: World, owners: set[str]) -> pd.DataFrame:
    """One served request per other user: its first sample's query."""
    with world.connect() as con:
        frame = con.execute("SELECT ? AS task, user_id, first(query ORDER BY sample_id) AS query FROM lamp_samples "
                            "WHERE task = ? GROUP BY user_id ORDER BY user_id", [TASK, TASK]).df()  # fmt: skip
    return frame[~frame["user_id"].isin(owners)].reset_index(drop=True)


def _served(world: World, owners: set[str], askers: list[str], monkeypatch) -> tuple[pd.DataFrame, list]:
    """The served pyfunc's predictions for every other user, and `prag answer` (answer_once) for ``askers``."""
    import mlflow

    from prag_models.mlops.answer_once import answer_once
    from prag_models.mlops.registry import registered_name
    from prag_models.storage.store import connect

    monkeypatch.setenv("MLFLOW_TRACKING_URI", world.settings.mlflow_uri)
    monkeypatch.setenv("PRAG_HOME", str(world.settings.home_path))
    model = mlflow.pyfunc.load_model(f"models:/{registered_name('reranker', TASK)}@champion")
    predictions = model.predict(_requests(world, owners)).drop(columns=["models"], errors="ignore")
    answers = []
    with connect(world.settings.duckdb_path) as con:  # read-write: an answer goes through generation_cache
        for user in askers:
            (text,) = con.execute("SELECT input FROM lamp_samples WHERE user_id = ? ORDER BY sample_id LIMIT 1",
                                  [user]).fetchone()  # fmt: skip
            for method in ("cfrag", "clusterrag_hybrid"):
                got = answer_once(con, world.settings, TASK, user, method, text)
                answers.append((user, method, got.user.neighbours, [(r.doc_id, r.source_user_id, round(r.score, 5))
                                for r in got.retrieved], got.prompt, got.output))  # fmt: skip
    return predictions, answers


def test_documents_others_may_not_see_change_nothing_another_user_gets(worlds, monkeypatch) -> None:
    a, b = worlds
    owners = _owners(a, b)
    assert a.hidden != b.hidden and owners == {f"u{n:04d}" for n in range(USERS) if _role(f"u{n:04d}")}
    compared, found = compare_tables(a, b)
    print(f"graph: {a.seconds:.0f} s and {b.seconds:.0f} s; compared {len(compared)} tables: {', '.join(compared)}; "
          f"excluded: {', '.join(sorted(EXCLUDED))}")  # fmt: skip
    assert set(CORE) <= set(compared), f"not compared: {sorted(set(CORE) - set(compared))}"
    assert found == [], "\n".join(found)
    # teeth: the owners themselves see the change, and the others are shown the owners' shareable documents
    with a.connect() as ca, b.connect() as cb:
        mine = [_table(c, "clusterrag_retrievals", set()) for c in (ca, cb)]
        owned = [f[f["user_id"].isin(owners)] for f in mine]
        assert differences("own", *owned), "no owner's own retrieval changed: the worlds differ in nothing seen"
        shown = ca.execute("SELECT count(*) FROM clusterrag_retrievals WHERE source_user_id <> user_id AND "
                           "list_contains(?, source_user_id) AND NOT list_contains(?, user_id)",
                           [sorted(owners)] * 2).fetchall()[0][0]  # fmt: skip
        assert shown > 0, "no other user is shown an owner's shareable document: the test would prove nothing"
        askers = sorted({u for (u,) in ca.execute(
            "SELECT user_id FROM cfrag_similar_users WHERE list_contains(?, neighbour_id) AND NOT "
            "list_contains(?, user_id)", [sorted(owners)] * 2).fetchall()})[:2]  # fmt: skip
    served = [_served(w, owners, askers, monkeypatch) for w in (a, b)]
    assert len(served[0][0]) == USERS - len(owners) and not differences("served", served[0][0], served[1][0])
    assert len(askers) == 2 and served[0][1] == served[1][1]


def test_a_user_known_only_from_private_documents_shapes_no_cluster_or_neighbour(worlds, tmp_path) -> None:
    """Defect 4: a user whose only documents are private (copies of another user's vectors, so that it would be
    that user's nearest neighbour) and who asks nothing gets no z_u; the clusters and neighbour lists stay as built."""
    from prag_models.stages.users import similar_user_rows, user_cluster_rows, user_embedding_rows

    a, _ = worlds
    with store_copy(a.settings.duckdb_path, tmp_path) as con:
        twin = con.execute("SELECT user_id FROM similar_users WHERE NOT list_contains(?, user_id) ORDER BY user_id "
                           "LIMIT 1", [sorted(a.hidden)]).fetchone()[0]  # fmt: skip
        con.execute("INSERT INTO document_embeddings SELECT task, 'u9000', 'p-' || doc_id, position, model_id, "
                    "content_hash, embedding FROM document_embeddings WHERE user_id = ?", [twin])  # fmt: skip
        con.execute("INSERT INTO document_visibility SELECT task, user_id, doc_id, 'private' FROM "
                    "document_embeddings WHERE user_id = 'u9000'")  # fmt: skip
        con.execute("INSERT INTO user_sharing VALUES (?, 'u9000', true, 'record')", [TASK])
        before = {t: _table(con, t, set()) for t in ("user_embeddings", "user_clusters", "similar_users")}

        def rebuilt() -> dict[str, pd.DataFrame]:
            frame, _ = user_embedding_rows(con, TASK, a.settings.privacy.default_share)
            con.execute("DELETE FROM user_embeddings WHERE task = ?", [TASK])
            con.execute("INSERT INTO user_embeddings BY NAME SELECT * FROM frame")
            clusters, _ = user_cluster_rows(con, TASK, a.settings)
            con.execute("DELETE FROM user_clusters WHERE task = ?", [TASK])
            con.execute("INSERT INTO user_clusters BY NAME SELECT * FROM clusters")
            similar, _ = similar_user_rows(con, TASK, a.settings)
            return {"user_embeddings": frame.to_pandas(), "user_clusters": clusters.to_pandas(),
                    "similar_users": similar.to_pandas()}  # fmt: skip

        after = rebuilt()
        assert "u9000" not in set(after["user_embeddings"]["user_id"])
        found = [d for t in before for d in differences(t, before[t], after[t])]
        assert found == [], "\n".join(found)
        con.execute("DELETE FROM document_visibility WHERE user_id = 'u9000'")  # teeth: shared, it moves the others
        shared = rebuilt()["similar_users"]
        assert ((shared["neighbour_id"] == "u9000") & (shared["user_id"] == twin)).any()


def test_what_the_shared_artefacts_read_holds_only_shareable_documents(worlds) -> None:
    """Defects 3 and 6 on the built world: every feedback candidate (an owner's own samples included), every row a
    tuning trial may rank and the probe's documents are shareable; the probe's texts are its vectors' documents."""
    from prag_models.evaluation.tuning import train_inputs
    from prag_models.methods.cfrag.feedback import load_feedback_inputs
    from prag_models.methods.cfrag.tables import load_probe
    from prag_models.methods.task_tables import profile_index

    a, _ = worlds
    with a.connect() as con:
        index, docs = profile_index(con, TASK, default_share=a.settings.privacy.default_share)
        inputs = load_feedback_inputs(con, TASK, a.settings)
        rows = [c.row for cands in inputs.candidates.values() for c in cands]
        assert rows and index.shareable[rows].all()
        owned = inputs.samples["user_id"].isin(set(a.hidden))
        assert owned.any(), "no owner's own sample is labelled: the check would prove nothing"
        view, _, truth = train_inputs(con, TASK, a.settings)
        for owner in a.hidden:
            assert index.shareable[view.visible_rows(owner, [owner])].all()
            assert not index.shareable[index.visible_rows(owner, [owner])].all()  # teeth: its own view shows them
        hidden_ids = {d for ds in a.hidden.values() for d in ds}
        assert truth is not None and not hidden_ids & set().union(*truth.relevant.values())
        probe = load_probe(con, TASK, a.settings.privacy.default_share)
        text_of = dict(zip(docs["text"], index.shareable, strict=True))
        assert probe.doc_texts and all(text_of[t] for t in probe.doc_texts)
        assert len(probe.doc_texts) == len(probe.doc_vectors)
