"""Issue 48, incremental equals from scratch: week 1 materialized, week 2 applied through the inbox along `prag
lifecycle`'s path (``cli/lifecycle.run_round``: the week dropped into ``<home>/inbox/<task>/``, its planted truth
added, jobs ``incremental_update_job``, ``prag_retrain`` and ``promote_cfrag_models``, launched in process), against
one run of the main job ``prag_demo`` on a home whose inbox held week 2 before its first run. Every decision table the
small world produces is compared: the utility plan, the verdict, ClusterRAG's and CFRAG's tuned knobs, the feedback
probe, the champions' evidence and the promotion rows, and the rows they are decided from.

Equal, asserted equal: the document set (``profile_documents`` row for row: LaMP ∪ the latest history versions,
merged as the incremental update merges them; nothing pending, nothing applied twice), z_u, the retrievals of
dense_global and the other baselines, of PBR and of CFRAG (the lifecycle's retrained challenger against the scratch
run's only bundle: the same inputs train the same models), CFRAG's tuned knobs, the feedback probe, the challenger's
evaluation, and every row read from equal rows.

Different by design, asserted within the stated tolerance:

* **The clustering.** The incremental update places the changed and new users in the clustering in effect (HDBSCAN
  ``approximate_predict``, docs/methods.md §3.7) and keeps every other user where week 1's fit put it; the scratch run
  fits HDBSCAN on all users. No bound on how far a refit regroups users holds in general (a refit may merge or split
  clusters; the assertion messages report the partitions' drift), so the test asserts the structure (the same users are
  clustered; every user week 2 did not touch keeps its week-1 cluster) and, in ``test_after_the_full_reclustering``,
  that the weekly full re-clustering (``full_reclustering_job``) followed by ClusterRAG's assets gives exactly the
  scratch run's clustering and every decision row: all that differs stems from the approximate assignment.
* **Rows that read the clustering, before that re-clustering.** ClusterRAG's retrievals may differ for an asker
  whose *pool* differs (its set of cluster mates or its neighbour list) and are equal for every other asker; what is
  read from them (per-sample scores, generated outputs, utility values) is equal wherever they are. ClusterRAG's
  evaluation rows then differ by at most (dev samples retrieved differently) / n for a metric in [0, 1], every other
  method's rows are equal, the plan and the verdict are equal when no dev sample is retrieved differently, and
  ClusterRAG's tuned knobs (searched on train samples under the clustering) when no train sample's asker moved.
* **What only a second bundle has.** The lifecycle keeps week 1's bundle as champion: its ``cfrag@champion`` rows,
  the utility's promotion phases, ``cfrag_promotion_evidence`` and ``model_promotions`` have no counterpart in a home
  with one bundle; the challenger's side of the gate's evidence equals the scratch bundle's own scores.
* **Caches keep more.** ``feedback_labels`` and ``generation_cache`` are keyed by their inputs: the lifecycle's hold
  week 1's entries too; every scratch entry is in them with the same value.

The embedder runs as configured ("auto": torch fp32 on AVX-512, ONNX Runtime int8 on an AVX2-only CPU); either way a
text's vector is a function of the text alone (int8 embeds one text a run: tests/test_embedder_backends.py), so both
homes embed the same texts alike.

`prag lifecycle`'s jobs select every asset downstream of the rewritten documents, outside the full re-clustering:
:func:`round_misses` is empty (before, dense_global, PBR, ClusterRAG and its tuned knobs stayed on week 1).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest
from conftest import write_config
from graph_helpers import range_tags

from prag_models.config.settings import load_settings

pytestmark = pytest.mark.models

TASK = "LaMP-2"
SECTIONS = {
    "data": {"tasks": [TASK]},
    "tuning": {"enabled": True, "budget_s": 600.0, "max_trials": 3},  # the trial count binds, not the clock
    "cfrag": {"feedback_probe_samples": 4, "train_epochs": 4},
}
#: Tables the incremental update rewrites for the changed users (stages/history.UPDATED_TABLES + the neighbours).
REWRITTEN = ("profile_documents", "document_embeddings", "user_embeddings", "user_clusters", "similar_users")
#: Methods whose rows read the clustering (cluster mates, neighbours, cluster-then-document search).
CLUSTERED = "clusterrag_"
#: What follows the full re-clustering in `test_after_the_full_reclustering`: ClusterRAG's assets and their readers.
CLUSTER_READERS = dg.AssetSelection.assets("tuned_settings", "clusterrag_retrievals").downstream() - \
    dg.AssetSelection.groups("retrieval_eval")  # fmt: skip


def _definitions(config: Path) -> dg.Definitions:
    """The project's assets, checks and the jobs both paths launch, on this prag.toml."""
    from prag_assets.automation.demo_job import demo_job, retrain_job
    from prag_assets.automation.promotion_jobs import promotion_jobs
    from prag_assets.automation.sensors import full_reclustering_job, incremental_update_job
    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    return dg.Definitions(assets=list(defs.assets), asset_checks=list(defs.asset_checks),
                          jobs=[demo_job(load_settings(config)), retrain_job(), incremental_update_job,
                                full_reclustering_job, *promotion_jobs],
                          resources=default_resources(config_file=str(config)),
                          executor=dg.in_process_executor)  # fmt: skip


def round_misses(definitions: dg.Definitions) -> list[str]:
    """The assets downstream of the rewritten tables that neither the full re-clustering nor a job of the round
    selects: what the round leaves on week 1."""
    from prag_assets.automation.demo_job import retrain_job
    from prag_assets.automation.sensors import full_reclustering_job, incremental_update_job

    graph = definitions.resolve_asset_graph()
    keys = lambda selection: {k.to_user_string() for k in selection.resolve(graph)}  # noqa: E731
    below = keys(dg.AssetSelection.assets(*REWRITTEN).downstream()) - set(REWRITTEN)
    covered = keys(retrain_job().selection) | keys(incremental_update_job.selection)
    return sorted(below - covered - keys(full_reclustering_job.selection))


def _job(definitions: dg.Definitions, job: str, instance, **kwargs) -> bool:
    """Run a job of the definitions in process; whether it succeeded."""
    return definitions.resolve_job_def(job).execute_in_process(instance=instance, raise_on_error=False,
                                                               **kwargs).success  # fmt: skip


def _materialize(definitions: dg.Definitions, selection, instance, tags: dict) -> None:
    """Materialize a selection (with its checks) in process."""
    result = dg.materialize(list(definitions.assets) + list(definitions.asset_checks), selection=selection,
                            resources=definitions.resources, instance=instance, tags=tags)  # fmt: skip
    assert result.success, f"materializing {selection} failed"


def _incremental(root: Path) -> Path:
    """Week 1, then `prag lifecycle`'s round with an in-process launcher; its prag.toml."""
    from prag_assets.automation.demo_job import PRAG_DEMO_JOB
    from prag_assets.cli.lifecycle import run_round

    root.mkdir(parents=True)
    config = write_config(root / "prag.toml", root / "home", generator_backend="fake", **SECTIONS)
    definitions, instance = _definitions(config), dg.DagsterInstance.ephemeral()
    assert _job(definitions, PRAG_DEMO_JOB, instance, tags=range_tags([TASK])), "week 1: prag_demo failed"
    def launch(job: str, span: str | None, partition: str | None, run_config: dict | None) -> int:
        tags = range_tags(span.split("...")) if span else {}
        ok = _job(definitions, job, instance, run_config=run_config, tags=tags, partition_key=partition)
        return 0 if ok else 1

    assert run_round(load_settings(config), "issue 48 test", launch) == 0
    return config


def _scratch(root: Path) -> Path:
    """Week 2 in the inbox (and in the demo's planted truth) before the first run of the main job."""
    from prag_assets.automation.demo_job import PRAG_DEMO_JOB
    from prag_models.data.demo_week import write_second_week
    from prag_models.data.history import inbox_dir

    root.mkdir(parents=True)
    config = write_config(root / "prag.toml", root / "home", generator_backend="fake", **SECTIONS)
    settings = load_settings(config)
    path, _ = write_second_week(settings.home_path / "lifecycle", TASK, settings)
    inbox = inbox_dir(settings.home_path, TASK)
    inbox.mkdir(parents=True)
    shutil.move(str(path), str(inbox / path.name))
    assert _job(_definitions(config), PRAG_DEMO_JOB, dg.DagsterInstance.ephemeral(), tags=range_tags([TASK]))
    return config


@pytest.fixture(scope="module")
def homes(tmp_path_factory) -> dict:
    """Both paths, once per module: read-only connections to the incremental home as the round left it, to the same
    home after the full re-clustering and ClusterRAG's assets, and to the scratch home."""
    root = tmp_path_factory.mktemp("incremental_equals_scratch")
    incremental = _incremental(root / "incremental")
    scratch = _scratch(root / "scratch")
    live = load_settings(incremental).duckdb_path
    before = root / "incremental_before.duckdb"
    shutil.copyfile(live, before)  # no connection is open: a consistent copy
    definitions, instance = _definitions(incremental), dg.DagsterInstance.ephemeral()
    assert _job(definitions, "full_reclustering_job", instance, partition_key=TASK)
    _materialize(definitions, CLUSTER_READERS, instance, range_tags([TASK]))
    paths = {"incremental": before, "reclustered": live, "scratch": load_settings(scratch).duckdb_path}
    cons = {name: duckdb.connect(str(path), read_only=True) for name, path in paths.items()}
    yield {"definitions": definitions, "settings": load_settings(scratch), **cons}
    for con in cons.values():
        con.close()


#: Floats (scores, similarities, vectors) agree to this: fp32 vectors of one text differ by ~1e-7 between batches.
ATOL = 1e-5


def _split(con, sql: str) -> tuple[pd.DataFrame, list[str], list[str]]:
    """A query's rows in a fixed order: (frame, key columns as text, float and vector columns)."""
    frame = con.execute(sql).df()
    vectors = [c for c in frame if frame[c].dtype.kind == "f" or frame[c].map(lambda v: isinstance(v, np.ndarray |
                                                                                                 list)).any()]
    keys = [c for c in frame if c not in vectors]
    frame[keys] = frame[keys].astype(str)
    return frame.sort_values(keys).reset_index(drop=True), keys, vectors


def _close(a: pd.DataFrame, b: pd.DataFrame, columns: list[str]) -> list[str]:
    """The float or vector columns of two aligned frames that differ by more than ATOL somewhere."""
    as_array = lambda frame, c: np.stack([np.atleast_1d(np.asarray(v, dtype=float)) for v in frame[c]])  # noqa: E731
    return [c for c in columns if len(a) and not np.allclose(as_array(a, c), as_array(b, c), atol=ATOL,
                                                             equal_nan=True)]  # fmt: skip


def _equal(homes: dict, sql: str, what: str, left: str = "incremental") -> None:
    """The same query on a home and on the scratch home gives the same rows (floats within ATOL)."""
    (a, keys, floats), (b, _, _) = _split(homes[left], sql), _split(homes["scratch"], sql)
    diff = a[keys].merge(b[keys], how="outer", indicator=True).query("_merge != 'both'")
    assert diff.empty and len(a) == len(b), f"{what}: {left} (left_only), scratch (right_only):\n{diff.head(20)}"
    far = _close(a, b, floats)
    assert not far, f"{what}: {far} differ by more than {ATOL}:\n{a.head(10)}\n{b.head(10)}"


def _subset(homes: dict, sql: str, what: str, may_lack: int = 0) -> None:
    """Every scratch row is an incremental row (floats within ATOL), but for at most ``may_lack`` of them."""
    (a, keys, floats), (b, _, _) = _split(homes["incremental"], sql), _split(homes["scratch"], sql)
    both = b.merge(a, on=keys, how="left", suffixes=("", "_incremental"), indicator=True)
    missing = both.query("_merge == 'left_only'")
    assert len(missing) <= may_lack, f"{what}: scratch rows the incremental home lacks:\n{missing.head(20)}"
    both = both.query("_merge == 'both'")
    far = _close(both[floats], both[[f"{c}_incremental" for c in floats]].set_axis(floats, axis=1), floats)
    assert not far, f"{what}: {far} differ by more than {ATOL}"


def _pools(con) -> dict[str, tuple]:
    """Each clustered user's pool: its cluster mates (as a set) and its neighbour list."""
    clusters = dict(con.execute("SELECT user_id, cluster FROM user_clusters WHERE task = ?", [TASK]).fetchall())
    mates: dict[int, set] = {}
    for user, cluster in clusters.items():
        mates.setdefault(cluster, set()).add(user)
    neighbours = dict(con.execute("SELECT user_id, list(neighbour_id ORDER BY rank) FROM similar_users WHERE task = ? "
                                  "GROUP BY user_id", [TASK]).fetchall())  # fmt: skip
    return {u: (frozenset(mates[c]), tuple(neighbours.get(u, ()))) for u, c in clusters.items()}


@pytest.fixture(scope="module")
def moved(homes: dict) -> dict:
    """The users whose pool differs between the two clusterings, the samples ClusterRAG retrieves differently for
    (dev: how many of them; train: train samples asked by a moved user) and the drift between the partitions."""
    from prag_models.users.incremental import clustering_drift

    a, b = _pools(homes["incremental"]), _pools(homes["scratch"])
    assert set(a) == set(b), "the two homes cluster different users"
    users = sorted(u for u in a if a[u] != b[u])
    labels = [dict(homes[h].execute("SELECT user_id, cluster FROM user_clusters").fetchall())
              for h in ("incremental", "scratch")]  # fmt: skip
    drift = clustering_drift(*labels)
    sql = "SELECT sample_id, user_id, method, rank, doc_id FROM clusterrag_retrievals WHERE task = ?"
    rows = [set(homes[h].execute(sql, [TASK]).fetchall()) for h in ("incremental", "scratch")]
    differing = {(sample, user) for sample, user, *_ in rows[0] ^ rows[1]}
    split = dict(homes["scratch"].execute("SELECT sample_id, split FROM lamp_samples WHERE task = ?",
                                          [TASK]).fetchall())  # fmt: skip
    train = homes["scratch"].execute("SELECT count(*) FROM lamp_samples WHERE task = ? AND split = 'train' AND "
                                     "list_contains(?, user_id)", [TASK, users]).fetchone()[0]  # fmt: skip
    return {"users": users, "samples": sorted(s for s, _ in differing), "askers": sorted({u for _, u in differing}),
            "dev": sum(split[s] == "dev" for s, _ in differing), "train": train,
            "adjusted_rand": drift["adjusted_rand"], "changed_share": drift["changed_share"]}  # fmt: skip


def _outside(moved: dict) -> str:
    """SQL: the row is not a clustered method's on a sample ClusterRAG retrieves differently for."""
    listed = ", ".join(f"'{s}'" for s in moved["samples"]) or "NULL"
    return f"NOT (method LIKE '{CLUSTERED}%' AND sample_id IN ({listed}))"


def test_the_round_recomputes_everything_the_new_documents_reach(homes: dict) -> None:
    """Every asset downstream of the tables the incremental update rewrites is in a job of the round (or of the full
    re-clustering): none is left on week 1's documents."""
    assert round_misses(homes["definitions"]) == []


def test_one_document_set_and_nothing_pending(homes: dict) -> None:
    """profile_documents row for row and z_u; the history included everywhere, nothing pending, nothing re-applied."""
    from prag_models.users.incremental import pending_history

    _equal(homes, "SELECT * FROM profile_documents", "profile_documents")
    _equal(homes, "SELECT user_id, n_docs, cold_start, embedding FROM user_embeddings", "user_embeddings (z_u)")
    for home in ("incremental", "scratch"):
        assert pending_history(homes[home], TASK).empty, f"{home}: history still pending"
    assert homes["scratch"].execute("SELECT count(*) FROM incremental_updates").fetchone()[0] == 0, \
        "the scratch run re-applied history its documents already held"  # fmt: skip


def test_the_clustering_differs_only_by_the_approximate_assignment(homes: dict, moved: dict) -> None:
    """The same users are clustered; every user week 2 did not touch keeps its week-1 cluster (no refit)."""
    kept = homes["incremental"].execute(
        "SELECT count(*) FROM user_clusters c JOIN cluster_state s USING (task, user_id) WHERE c.task = ? AND "
        "c.user_id NOT IN (SELECT user_id FROM incremental_updates) AND c.cluster IS DISTINCT FROM s.fit_cluster",
        [TASK]).fetchone()[0]  # fmt: skip
    assert kept == 0, f"{kept} untouched users left their week-1 cluster ({moved})"


def test_clusterrag_differs_only_for_askers_whose_pool_differs(moved: dict) -> None:
    """The tolerance of the approximate assignment: ClusterRAG retrieves differently only where the pool differs."""
    assert set(moved["askers"]) <= set(moved["users"]), moved


def test_retrievals_equal_where_the_clustering_is_not_read(homes: dict, moved: dict) -> None:
    """dense_global and every baseline, PBR and CFRAG (challenger = the scratch bundle) retrieve the same documents;
    ClusterRAG the same for every asker whose pool is the same."""
    columns = "method, sample_id, user_id, rank, doc_id, source_user_id"
    _equal(homes, f"SELECT {columns}, score FROM baseline_retrievals", "baseline_retrievals")
    _equal(homes, f"SELECT {columns}, score FROM pbr_lamp_retrievals", "pbr_lamp_retrievals")
    _equal(homes, f"SELECT {columns} FROM cfrag_retrievals WHERE method NOT LIKE '%@champion'", "cfrag_retrievals")
    _equal(homes, f"SELECT {columns} FROM clusterrag_retrievals WHERE {_outside(moved)}",
           f"clusterrag_retrievals outside the samples retrieved differently {moved}")  # fmt: skip


def test_scores_outputs_and_utility_equal_sample_by_sample(homes: dict, moved: dict) -> None:
    """Per-sample retrieval scores, generated outputs and utility values: equal but for ClusterRAG where it retrieves
    differently; the promotion phases exist only beside a second bundle; the caches hold every scratch entry."""
    _equal(homes, f"SELECT * FROM lamp_retrieval_sample_scores WHERE method NOT LIKE '%@champion' AND "
                  f"{_outside(moved)}", f"lamp_retrieval_sample_scores ({moved})")  # fmt: skip
    _equal(homes, f"SELECT method, sample_id, prediction, gold FROM generations WHERE {_outside(moved)}",
           f"generations ({moved})")  # fmt: skip
    _equal(homes, f"SELECT method, sample_id, phase, value FROM llm_utility WHERE phase NOT LIKE 'promotion%' AND "
                  f"{_outside(moved)}", f"llm_utility ({moved})")  # fmt: skip
    _subset(homes, "SELECT sample_id, doc_id, source_user_id, output, score FROM feedback_labels", "feedback_labels")
    # a prompt of ClusterRAG on a sample it retrieves differently for is the scratch home's own
    moved_prompts = homes["scratch"].execute(
        f"SELECT (SELECT count(*) FROM generations WHERE NOT ({_outside(moved)})) + (SELECT count(*) FROM llm_utility "
        f"WHERE NOT ({_outside(moved)}))").fetchone()[0]  # fmt: skip
    _subset(homes, "SELECT generator_id, prompt_hash, output FROM generation_cache", f"generation_cache ({moved})",
            may_lack=moved_prompts)  # fmt: skip


def test_decisions_equal_where_their_rows_are(homes: dict, moved: dict) -> None:
    """Evaluation rows: every method's but ClusterRAG's equal, ClusterRAG's within (dev samples retrieved
    differently) / n; the plan and the verdict equal when no dev sample is; CFRAG's knobs and the probe equal,
    ClusterRAG's knobs when no train sample's asker moved."""
    from prag_models.evaluation.verdict import verdicts_for

    n = homes["scratch"].execute("SELECT count(*) FROM lamp_samples WHERE task = ? AND split = 'dev'",
                                 [TASK]).fetchone()[0]  # fmt: skip
    for table in ("lamp_retrieval_evaluation", "lamp_evaluation"):
        _equal(homes, f"SELECT method, metric, value, ci_low, ci_high, n_samples FROM {table} WHERE method NOT LIKE "
                      f"'%@champion' AND method NOT LIKE '{CLUSTERED}%'", table)  # fmt: skip
        sql = f"SELECT method, metric, value FROM {table} WHERE method LIKE '{CLUSTERED}%' ORDER BY ALL"
        a, b = homes["incremental"].execute(sql).df(), homes["scratch"].execute(sql).df()
        assert a[["method", "metric"]].equals(b[["method", "metric"]]), table
        bounded = a["metric"].str.contains("ndcg|recall|mrr|hit|accuracy")
        gap = (a["value"] - b["value"]).abs()[bounded]
        assert (gap <= moved["dev"] / n + 1e-9).all(), (table, moved, a.assign(scratch=b["value"]))
    _equal(homes, "SELECT * FROM cfrag_tuned_settings", "cfrag_tuned_settings")
    _equal(homes, "SELECT * FROM feedback_probe", "feedback_probe")
    if not moved["train"]:
        _equal(homes, "SELECT * FROM tuned_settings", "tuned_settings")
    if not moved["dev"]:
        _equal(homes, "SELECT * EXCLUDE (seconds_per_prompt) FROM llm_utility_plans", "llm_utility_plans")
        verdicts = [verdicts_for(homes[h], homes["settings"], [TASK]) for h in ("incremental", "scratch")]
        pd.testing.assert_frame_equal(*verdicts, obj="the verdict")


def test_the_challengers_evidence_is_the_scratch_bundles(homes: dict) -> None:
    """The lifecycle's challenger (v2) is evaluated as the scratch run's only bundle (v1), on the same data version;
    the gate's evidence holds its per-sample scores; only the lifecycle has a champion to weigh it against."""
    sql = "SELECT kind, registered_name, metric, value, is_primary, data_version FROM cfrag_model_evaluations WHERE {}"
    pd.testing.assert_frame_equal(_split(homes["incremental"], sql.format("version = 2"))[0],
                                  _split(homes["scratch"], sql.format("version = 1"))[0],
                                  obj="cfrag_model_evaluations: the challenger v2 vs the scratch v1")  # fmt: skip
    evidence = homes["incremental"].execute("SELECT DISTINCT metric FROM cfrag_promotion_evidence WHERE task = ? AND "
                                            "evidence = 'retrieval'", [TASK]).fetchall()  # fmt: skip
    assert evidence, "the lifecycle recorded no retrieval evidence"
    for (metric,) in evidence:
        challenger = homes["incremental"].execute(
            "SELECT sample_id, challenger_value FROM cfrag_promotion_evidence WHERE task = ? AND metric = ? "
            "AND evidence = 'retrieval' ORDER BY 1", [TASK, metric]).fetchall()  # fmt: skip
        own = homes["scratch"].execute(
            "SELECT sample_id, value FROM lamp_retrieval_sample_scores WHERE task = ? AND method = 'cfrag' "
            "AND metric = ? ORDER BY 1", [TASK, metric]).fetchall()  # fmt: skip
        assert [s for s, _ in challenger] == [s for s, _ in own], metric
        np.testing.assert_allclose([v for _, v in challenger], [v for _, v in own], atol=ATOL, err_msg=metric)
    assert homes["incremental"].execute("SELECT count(*) FROM model_promotions WHERE task = ?", [TASK]).fetchone()[0]
    tables = {t for (t,) in homes["scratch"].execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert not {"model_promotions", "cfrag_promotion_evidence"} & tables


def test_after_the_full_reclustering(homes: dict, moved: dict) -> None:
    """The weekly full re-clustering of the incremental home, then ClusterRAG's assets and their readers: the
    scratch run's clustering and every row and decision read from it, exactly — the rest of the difference was the
    approximate assignment alone."""
    from prag_models.evaluation.verdict import verdicts_for

    same = lambda sql, what: _equal(homes, sql, f"after the re-clustering: {what} ({moved})", "reclustered")  # noqa: E731
    same("SELECT user_id, cluster FROM user_clusters", "user_clusters")
    same("SELECT user_id, neighbour_id, rank FROM similar_users", "similar_users")
    same("SELECT * FROM tuned_settings", "tuned_settings")
    same("SELECT method, sample_id, user_id, rank, doc_id, source_user_id FROM clusterrag_retrievals",
         "clusterrag_retrievals")  # fmt: skip
    same("SELECT * FROM lamp_retrieval_sample_scores WHERE method NOT LIKE '%@champion'", "per-sample scores")
    same("SELECT method, sample_id, prediction, gold FROM generations", "generations")
    same("SELECT method, sample_id, phase, value FROM llm_utility WHERE phase NOT LIKE 'promotion%'", "llm_utility")
    for table in ("lamp_retrieval_evaluation", "lamp_evaluation"):
        same(f"SELECT method, metric, value, ci_low, ci_high, n_samples FROM {table} WHERE method NOT LIKE "
             "'%@champion'", table)  # fmt: skip
    same("SELECT * EXCLUDE (seconds_per_prompt) FROM llm_utility_plans", "llm_utility_plans")
    verdicts = [verdicts_for(homes[h], homes["settings"], [TASK]) for h in ("reclustered", "scratch")]
    pd.testing.assert_frame_equal(*verdicts, obj="the verdict after the re-clustering")
