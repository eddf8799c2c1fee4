"""item_cf (docs/methods.md §5.2): on a world of the tagging family it beats dense_global because it counts who agrees;
identical documents collapse into one text that says how many users the asker may see wrote it; a document its owner
keeps unshared changes no count and no ranking another user gets.

No model is loaded: texts are embedded by a hashed bag of words, enough to tell one item's description from another's.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prag_models.data.demo import write_demo
from prag_models.data.lamp import load_lamp_task
from prag_models.evaluation.retrieval import per_sample_scores
from prag_models.generation.prompts import prompt_document
from prag_models.methods.baselines import retrieve_dense_global
from prag_models.methods.item_cf import ItemCfRetriever
from prag_models.methods.profiles import ProfileIndex, text_keys_of
from prag_models.metrics.intervals import paired_difference

K = 3


def _embed(texts: list[str], dim: int = 1024) -> np.ndarray:
    """Unit hashed bag-of-words vectors (a stand-in for the encoder: the same words, the same direction)."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"[a-z]+", text.lower()):
            out[i, zlib.crc32(word.encode()) % dim] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


class World:
    """A tagging world's LaMP-2 documents as an index, its dev samples, their query vectors and relevant documents."""

    def __init__(self, root: Path) -> None:
        manifest = write_demo(root, users=128, communities=4, dev_samples=96, tasks=("LaMP-2",), family="tagging")
        loaded = load_lamp_task(root, "LaMP-2")
        profiles = {s.user_id: s.profile for split in loaded.values() for s in split}
        owners = [u for u in sorted(profiles) for _ in profiles[u]]
        docs = [d for u in sorted(profiles) for d in profiles[u]]
        self.texts = [d.text for d in docs]
        self.items = [d.fields["description"] for d in docs]  # what a document is about (data.tasks.ITEM_FIELDS)
        self.doc_ids, self.owners = [d.doc_id for d in docs], owners
        self.vectors = _embed(self.texts)
        self.dev = loaded["dev"]
        self.queries = _embed([s.query for s in self.dev])
        info = manifest["tasks"]["LaMP-2"]["sample_info"]
        self.relevant = {s.sample_id: set(info[s.sample_id]["relevant_docs"]) for s in self.dev}
        mean = {u: self.vectors[[i for i, o in enumerate(owners) if o == u]].mean(axis=0) for u in profiles}
        self.content = {u: v / np.linalg.norm(v) for u, v in mean.items()}  # z_u: the mean document vector

    def index(self, shareable: np.ndarray | None = None, keep: np.ndarray | None = None) -> ProfileIndex:
        """The documents (the ``keep`` rows only) with their sharing flags (default: all shared)."""
        keep = np.ones(len(self.texts), dtype=bool) if keep is None else keep
        flags = np.ones(len(self.texts), dtype=bool) if shareable is None else shareable
        texts = [t for t, k in zip(self.texts, keep, strict=True) if k]
        items = [t for t, k in zip(self.items, keep, strict=True) if k]
        return ProfileIndex([d for d, k in zip(self.doc_ids, keep, strict=True) if k],
                            [o for o, k in zip(self.owners, keep, strict=True) if k], texts, self.vectors[keep],
                            flags[keep], text_keys_of(texts), text_keys_of(items))  # fmt: skip

    def ndcg(self, found: list) -> np.ndarray:
        """NDCG@3 of each dev sample's ranking against the planted relevance (the retrieval evaluation's metric)."""
        runs = pd.DataFrame([(s.sample_id, rank, r.doc_id) for s, docs in zip(self.dev, found, strict=True)
                             for rank, r in enumerate(docs, 1)], columns=["sample_id", "rank", "doc_id"])  # fmt: skip
        ids = [s.sample_id for s in self.dev]
        scores = per_sample_scores(runs.assign(method="m"), {"m": ids}, K, self.relevant)
        return scores[scores["metric"] == f"ndcg@{K}"].set_index("sample_id")["value"].reindex(ids).to_numpy()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("tagging"))


def _item_cf(world: World, index: ProfileIndex, **knobs: float) -> list:
    retriever = ItemCfRetriever(index, world.content, **knobs)
    return retriever.retrieve_many([s.user_id for s in world.dev], world.queries, K)


def test_on_a_tagging_world_item_cf_beats_dense_global(world: World) -> None:
    """The crowd's agreement on the asked item, counted, puts the asker's tag first; dense_global orders the item's
    differently tagged texts by cosine alone. Paired NDCG@3 gain over dense_global, 95 % interval above 0 (n = 96)."""
    index = world.index()
    dense_global = retrieve_dense_global(index, [s.user_id for s in world.dev], world.queries, K)
    gain = paired_difference(world.ndcg(_item_cf(world, index)), world.ndcg(dense_global))
    assert gain.n == 96 and gain.low > 0, gain


def test_the_tagging_world_repeats_items_across_users(world: World) -> None:
    """What the family is for: most texts of a dev question's item were written by several users."""
    index = world.index()
    found = _item_cf(world, index)
    assert np.mean([r.writers for docs in found for r in docs[:1]]) > 2
    for docs in found:
        assert len({index.text_keys[r.row] for r in docs}) == len(docs) == K  # each text once


def test_identical_documents_collapse_into_one_counted_text() -> None:
    """writers = the users the viewer may see who wrote the text; the viewer's own unshared copy counts for itself
    only; one row per text stands for it in a search; an item's documents are those with its item key."""
    texts = ["x comedy", "x comedy", "x drama", "x comedy", "y comedy", "x comedy"]
    users = ["a", "b", "b", "c", "c", "d"]
    shared = np.array([True, True, True, True, True, False])  # d keeps its copy to itself
    items = text_keys_of([t.split()[0] for t in texts])
    index = ProfileIndex([f"d{i}" for i in range(6)], users, texts, _embed(texts), shared, text_keys_of(texts), items)
    names = index.owners.names
    assert [names[c] for c in index.writers("a", 0)] == ["a", "b", "c"]
    assert [names[c] for c in index.writers("d", 5)] == ["a", "b", "c", "d"]
    assert index.same_text_rows("a", 3).tolist() == [0, 1, 3]
    assert index.same_item_rows("a", 0).tolist() == [0, 1, 2, 3] and index.same_item_rows("d", 4).tolist() == [4]
    assert index.collapsed_mask().tolist() == [True, False, True, False, True, False]
    assert index.with_opted_out(["b"]).same_item_rows("a", 0).tolist() == [0, 3]


def test_where_no_item_recurs_item_cf_ranks_as_dense_global(world: World) -> None:
    """The control: every document its own item (no item field) and no text repeated, nothing is counted and
    item_cf's ranking is dense_global's, document for document."""
    unique = [f"{t} {i}" for i, t in enumerate(world.texts)]  # every text distinct, the vectors unchanged
    index = ProfileIndex(world.doc_ids, world.owners, unique, world.vectors, np.ones(len(unique), dtype=bool),
                         text_keys_of(unique))  # fmt: skip
    found = _item_cf(world, index)
    dense_global = retrieve_dense_global(index, [s.user_id for s in world.dev], world.queries, K)
    assert [[r.doc_id for r in docs] for docs in found] == [[r.doc_id for r in docs] for docs in dense_global]
    assert {r.writers for docs in found for r in docs} == {1}


def test_a_hidden_document_changes_no_count_or_ranking_another_user_gets(world: World) -> None:
    """Non-interference: with a seeded tenth of the documents kept unshared by their owners, every other user's
    item_cf ranking (documents, sources, scores, counts) equals the one over an index without those documents at all;
    the owners themselves still count their own copies."""
    hidden = np.random.default_rng(0).random(len(world.texts)) < 0.1
    owners_of_hidden = {o for o, h in zip(world.owners, hidden, strict=True) if h}
    with_hidden = _item_cf(world, world.index(shareable=~hidden))
    without = _item_cf(world, world.index(keep=~hidden))
    compared = 0
    for s, a, b in zip(world.dev, with_hidden, without, strict=True):
        if s.user_id in owners_of_hidden:
            continue
        assert [(r.doc_id, r.source_user_id, r.writers, round(r.score, 9)) for r in a] == \
               [(r.doc_id, r.source_user_id, r.writers, round(r.score, 9)) for r in b], s.sample_id  # fmt: skip
        compared += 1
    assert compared > 20
    everyone = _item_cf(world, world.index())  # teeth: sharing everything changes somebody's counts
    assert any([r.writers for r in a] != [r.writers for r in b] for a, b in zip(everyone, without, strict=True))


def test_on_the_shared_view_even_an_owner_counts_no_hidden_document(world: World) -> None:
    """The tuning searches read the shared view (privacy.shareable): there every user, the owner included, sees and
    counts the shareable documents only, so item_cf's lists equal those over an index without the hidden ones."""
    from prag_models.privacy.shareable import shared_view

    hidden = np.random.default_rng(1).random(len(world.texts)) < 0.1
    users = [s.user_id for s in world.dev]
    on_view = ItemCfRetriever(shared_view(world.index(shareable=~hidden)), world.content).retrieve_many(
        users, world.queries, K)  # fmt: skip
    without = _item_cf(world, world.index(keep=~hidden))
    assert [[(r.doc_id, r.writers) for r in docs] for docs in on_view] == \
           [[(r.doc_id, r.writers) for r in docs] for docs in without]  # fmt: skip


def test_the_prompt_says_how_many_users_wrote_a_text() -> None:
    """A collapsed text opens with its count (in front: a truncated long document keeps it); a single one is as is."""
    doc = "'description': x 'tag': comedy"
    assert prompt_document("LaMP-2", doc, {}, 3) == f"(3 users) {doc}"
    assert prompt_document("LaMP-2", doc, {}) == doc
    rated = prompt_document("LaMP-3", "great", {"text": "great", "score": "5"}, 2)
    assert rated == "(2 users) 'review': great 'score': 5"


def test_a_counted_texts_writers_are_the_prompts_provenance() -> None:
    """What `prag forget` deletes a cached answer by: every user with a text the prompt shows counted (writers > 1),
    not only the copy's owner; an uncounted document names its owner alone."""
    import duckdb

    from prag_models.stages.generation import prompt_users

    with duckdb.connect(":memory:") as con:
        con.execute("CREATE TABLE profile_documents AS SELECT * FROM (VALUES ('LaMP-2', 'b', 'd1', 'x comedy'), "
                    "('LaMP-2', 'c', 'd2', 'x comedy'), ('LaMP-2', 'd', 'd3', 'x drama'), ('LaMP-2', 'e', 'd4', "
                    "'x drama')) t(task, user_id, doc_id, text)")  # fmt: skip
        con.execute("CREATE TABLE lamp_samples AS SELECT 'LaMP-2' AS task, 's1' AS sample_id, 'a' AS user_id")
        con.execute("CREATE TABLE clusterrag_retrievals AS SELECT * FROM (VALUES ('LaMP-2', 'item_cf', 's1', 'a', 1, "
                    "'d1', 'b', 1.5, 2), ('LaMP-2', 'item_cf', 's1', 'a', 2, 'd3', 'd', 1.2, 1)) t(task, method, "
                    "sample_id, user_id, rank, doc_id, source_user_id, score, writers)")  # fmt: skip
        assert prompt_users(con, "LaMP-2", [("item_cf", "s1")]) == [["a", "b", "c", "d"]]
