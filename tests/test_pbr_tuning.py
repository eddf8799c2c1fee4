"""PBR's knobs tuned per dataset, cross-fitted over persons or communities (docs/methods.md §4.7): the fast re-ranker
ranks as the evaluation does, the folds hold out persons (communities when several are pooled), no question is
ranked by knobs chosen on it, a knob that matters is found, and the real PersonaBench run stores, checks, logs and
evaluates the tuned PBR next to the authors' settings."""

import numpy as np
import pytest
from test_pbr_graph import _checks, _con, _meta

from prag_models.config.settings import PbrSettings, TuningSettings
from prag_models.data.personabench import RetrievalQuestion, Segment
from prag_models.evaluation.pbr_tuning import tune_pbr
from prag_models.methods.pbr import PbrExpansion
from prag_models.methods.pbr_eval import EmbeddingCache, retrieve_rankings
from prag_models.methods.pbr_knobs import ALL_FOLDS, PBR_KNOB_SPACE, PbrVectors, fold_of, with_pbr_knobs
from prag_models.stages.pbr_tuning import pbr_vectors

DIM = 16


class TableEmbedder:
    """A deterministic embedder: each text's vector is looked up (unknown texts get a seeded random unit vector)."""

    dim = DIM

    def __init__(self, table: dict[str, np.ndarray] | None = None) -> None:
        self.table = table or {}

    def embed(self, texts):
        out = []
        for t in texts:
            if t not in self.table:
                v = np.random.default_rng(abs(hash(t)) % 2**32).normal(size=DIM)
                self.table[t] = (v / np.linalg.norm(v)).astype(np.float32)
            out.append(self.table[t])
        return np.stack(out)


def _world(persons: int = 6, questions: int = 8, docs: int = 12, seed: int = 0, community: bool = False):
    """Persons whose gold segment is the one the pseudo reasoning points at, while the question and the anchor point
    elsewhere: a heavier reasoning weight and no anchor rank the gold first."""
    rng = np.random.default_rng(seed)
    unit = lambda v: (v / np.linalg.norm(v)).astype(np.float32)  # noqa: E731
    table, segments, qs, expansions = {}, {}, [], {}
    for p in range(persons):
        user = f"p{p}"
        segments[user] = [Segment(user, f"{user}-s{i}", f"{user} text {i}") for i in range(docs)]
        vecs = [unit(rng.normal(size=DIM)) for _ in range(docs)]
        table.update({s.text: v for s, v in zip(segments[user], vecs, strict=True)})
        for j in range(questions):
            gold, decoy = rng.choice(docs, 2, replace=False)
            q_id = f"c{p % 2}/{user}-q{j}" if community else f"{user}-q{j}"
            question, reasoning = f"{q_id} question", f"{q_id} reasoning"
            table[question] = unit(vecs[decoy] + 0.3 * rng.normal(size=DIM))
            table[reasoning] = unit(vecs[gold] + 0.6 * rng.normal(size=DIM))
            utterances = (f"{q_id} utterance",)
            table[utterances[0]] = unit(rng.normal(size=DIM))
            expansions[q_id] = PbrExpansion(utterances, reasoning, "test", "")
            qs.append(RetrievalQuestion("synthetic", user, q_id, question, [[f"{user}-s{gold}"]], "Basic information"))
    return qs, segments, expansions, EmbeddingCache(TableEmbedder(table))


def test_fast_reranker_ranks_as_the_evaluation_does():
    """PbrVectors.rank with the authors' settings and with other knob values equals retrieve_rankings' pbr."""
    qs, segments, expansions, cache = _world(persons=3)
    vectors = pbr_vectors(qs, segments, expansions, cache)
    for values in ({}, {"pbr.theta": 0.3, "pbr.k2": 3, "pbr.anchor_weight": 0.5, "pbr.utterance_weight": 2.0,
                        "pbr.reasoning_weight": 4.0}):  # fmt: skip
        settings = with_pbr_knobs(PbrSettings(), values)
        ranked = retrieve_rankings(qs, segments, cache, ["pbr"], expansions, settings)
        assert all(vectors.rank(q, settings) == ranked[("pbr", q.q_id)] for q in qs)


def test_folds_hold_out_persons_or_communities():
    """Persons round robin into at most n folds; with several communities pooled, whole communities; at most as many
    folds as units."""
    qs, *_ = _world(persons=6)
    fold = fold_of(qs, 4)
    assert set(fold.values()) == {0, 1, 2, 3}
    assert all(len({fold[q.q_id] for q in qs if q.user == u}) == 1 for u in {q.user for q in qs})
    pooled, *_ = _world(persons=6, community=True)
    by_community = fold_of(pooled, 5)
    assert set(by_community.values()) == {0, 1}  # two communities: two folds, never a person split from it
    assert all(by_community[q.q_id] == int(q.q_id[1]) for q in pooled)


def test_a_knob_that_matters_is_found_and_no_question_is_ranked_by_knobs_chosen_on_it():
    """The reasoning points at the gold: every fold moves off the authors' settings and the held-out gain is above 0.
    Breaking the gold of one fold's questions leaves the settings that rank that fold unchanged."""
    qs, segments, expansions, cache = _world()
    vectors = pbr_vectors(qs, segments, expansions, cache)
    tuning = TuningSettings(budget_s=60, max_trials=30)
    result = tune_pbr("synthetic", vectors, PbrSettings(), tuning, n_folds=3)
    assert result.stats["folds"] == 3 and result.stats["folds_moved"] >= 2
    assert result.stats["held_out_gain_low"] > 0, result.stats
    assert set(result.rows["fold"]) == {"0", "1", "2", ALL_FOLDS}
    assert all(sorted(knobs) == sorted(PBR_KNOB_SPACE) for _, knobs in result.rows.groupby("fold")["knob"])
    held = set(result.rows.drop_duplicates("fold")["held_out"]) - {0}
    assert sum(result.rows.drop_duplicates("fold")["held_out"]) == len(qs) and held
    fold = fold_of(qs, 3)
    broken = [q if fold[q.q_id] != 0 else RetrievalQuestion(q.dataset, q.user, q.q_id, q.question, [["none"]],
                                                             q.category) for q in qs]  # fmt: skip
    again = tune_pbr("synthetic", PbrVectors(broken, vectors.docs, vectors.ids, vectors.query, vectors.prf),
                     PbrSettings(), tuning, n_folds=3)  # fmt: skip
    assert all(again.per_question[q.q_id] == result.per_question[q.q_id] for q in qs if fold[q.q_id] == 0)


@pytest.mark.realdata
@pytest.mark.models
def test_real_personabench_tuned_next_to_the_authors_settings(personabench_graph):
    """Community 1 (3 persons, replayed expansions): pbr_tuned_settings holds every knob per fold (3 persons, 'all'),
    its check passes, the MLflow run carries the search, and the evaluation has pbr (cross-fitted) and pbr@default
    (the authors' settings: R@5 as before tuning existed)."""
    config, result = personabench_graph
    assert all(_checks(result).values())
    assert "pbr_tuned_settings:tuned_values_in_space" in _checks(result)
    with _con(config) as con:
        folds = con.execute("SELECT fold, count(*), max(held_out) FROM pbr_tuned_settings GROUP BY fold").fetchall()
        r5 = dict(con.execute("SELECT method, value FROM retrieval_evaluation WHERE category = 'Overall' AND "
                              "metric = 'recall' AND k = 5 AND dataset = 'personabench'").fetchall())  # fmt: skip
    assert {f for f, n, _ in folds} == {"0", "1", "2", ALL_FOLDS} and {n for _, n, _ in folds} == {len(PBR_KNOB_SPACE)}
    assert {"base", "pbr", "pbr@default"} <= set(r5) and r5["pbr@default"] > r5["base"]
    stats = _meta(result, "pbr_tuned_settings", "per_dataset")
    assert stats is not None

    import mlflow

    from prag_models.config.settings import load_settings

    client = mlflow.MlflowClient(tracking_uri=load_settings(config).mlflow_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              "attributes.run_name = 'pbr-tuning-personabench'")  # fmt: skip
    assert len(runs) == 1 and "fold-all.pbr.theta" in runs[0].data.params
    assert "held_out_gain" in runs[0].data.metrics
