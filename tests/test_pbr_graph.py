"""PBR in the Dagster graph: the retrieval_eval group on small PersonaBench / LongMemEval files written here and on
the real shared data, and the LaMP query-side option (pbr_lamp_retrievals) on a tiny demo."""

import json
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from conftest import materialize_graph, partition_metadata, write_config

from prag_models.config.settings import load_settings

GROUP = "retrieval_eval"
PBR_METHODS = {"base", "pbr", "pbr_wo_anchor", "pbr_wo_prf"}
QE_METHODS = {"hyde", "query2term", "mill", "cot", "thinkqe"}


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def _personabench(root: Path) -> None:
    """Two persons with private data (Ann, Cy) and one without (Bob); four question types, cached expansions."""
    c = root / "personabench" / "community_1"
    priv = c / "private_data" / "noise_0.0"
    topics = {"Ann": ["yoga classes", "baking sourdough", "her sister Mia", "jazz records"],
              "Cy": ["mountain biking", "learning Rust", "his dog Rex", "chess openings"]}

    def conv(name: str, i: int) -> dict:
        text = f"I spent the weekend on {topics[name][i]}"
        return {"session": f"conversation---session---{i}", "time": f"t{i}", "target_name": "Pat",
                "segment_id": f"{name}-c{i}", "conversation": [{"role": name, "content": text}]}

    _write(priv / "conversation_data_all.json", [
        {"Name": n, "Data": [{"Target_name": "Pat", "Conversations": [conv(n, i) for i in range(4)]}]} for n in topics])
    _write(priv / "user_ai_interaction_data_all.json", [
        {"Name": n, "Data": [{"session": "uai", "time": "t9", "segment_id": f"{n}-u{i}", "user_ai_interaction": [
            {"role": "user", "content": f"Give me tips about {t}"}]} for i, t in enumerate(topics[n][:2])]}
        for n in topics])
    _write(priv / "purchase_history_data_all.json", [
        {"Name": n, "Data": [{"session": "buy", "time": "t8", "segment_id": f"{n}-p0", "purchase_history": [
            {"title": f"Book about {topics[n][3]}", "categories": ["Books"]}]}]} for n in topics])

    def qa(q_id: str, question: str, qtype: str, difficulty: str = "easy") -> dict:
        return {"q_id": q_id, "question": question, "answer": "x", "type": qtype, "difficulty": difficulty}

    qas = {"Ann": [qa("a1", "What exercise class does Ann attend?", "Basic information"),
                   qa("a2", "What does Ann like to bake?", "Preference", "hard"),
                   qa("a3", "Who is Ann's sister?", "Social"), qa("a4", "Is Ann happy?", "Subjective")],
           "Cy": [qa("c1", "Which programming language is Cy learning?", "Preference"),
                  qa("c2", "What is the name of Cy's dog?", "Social", "hard")]}
    _write(c / "eval_info" / "eval_info_all.json", [{"Name": n, "Eval_Info": {"qa": q}} for n, q in qas.items()]
           + [{"Name": "Bob", "Eval_Info": {"qa": [qa("b1", "Where does Bob live?", "Basic information")]}}])
    gold = {"a1": {"yoga": ["Ann-c0", "Ann-u0"]}, "a2": {"bread": ["Ann-c1"], "cake": ["Ann-u1"]},
            "a3": {"Mia": ["Ann-c2"]}, "a4": {"x": ["Ann-c0"]}, "c1": {"Rust": ["Cy-c1", "Cy-u1"]},
            "c2": {"Rex": ["Cy-c2"]}}
    _write(c / "eval_info" / "qa_gt_context_all_noise_0.0.json",
           [{"q_id": q, "question": "", "answer": "x", "segment_id": g} for q, g in gold.items()])
    cached = [{"Name": n, "Eval_Info": {"qa": [dict(x, fake_10=[f"I talk about {x['question']} {i}" for i in range(10)],
                                                      reason=f"Step by step: {x['question']}") for x in q]}}
              for n, q in qas.items()]
    _write(c / "eval_info" / "pbr_cached_expansions.json", cached)


def _longmemeval(root: Path) -> None:
    """Two questions with their own four-session haystacks, and one abstention question (skipped)."""
    def turn(text: str, answer: bool = False) -> dict:
        return {"role": "user", "content": text, **({"has_answer": True} if answer else {})}

    def record(q_id: str, question: str, facts: list[str], gold: int) -> dict:
        sessions = [[turn(f, i == gold), {"role": "assistant", "content": "ok"}] for i, f in enumerate(facts)]
        return {"question_id": q_id, "question_type": "single-session-user", "question": question, "answer": "x",
                "question_date": "2023/05/01", "haystack_session_ids": [f"{q_id}-s{i}" for i in range(len(facts))],
                "haystack_dates": [f"d{i}" for i in range(len(facts))], "haystack_sessions": sessions,
                "answer_session_ids": [f"{q_id}-s{gold}"]}

    facts = ["I moved to Lisbon last spring", "My favourite food is ramen", "I play the cello", "I work as a nurse"]
    _write(root / "longmemeval" / "longmemeval_s_3.json", [
        record("q1", "Which city did I move to?", facts, 0), record("q2", "What instrument do I play?", facts, 2),
        record("q3_abs", "What is my cat called?", facts, 1)])


def _eval_config(tmp_path: Path, data: Path, **pbr) -> Path:
    return write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                        data={"real_data_dir": str(data)}, pbr=pbr)


def _materialize(config: Path, raise_on_error: bool = True, selection=None):
    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    return dg.materialize([*defs.assets, *defs.asset_checks], resources=default_resources(config_file=str(config)),
                          selection=selection or dg.AssetSelection.groups(GROUP), raise_on_error=raise_on_error)


def _checks(result) -> dict[str, bool]:
    return {f"{e.event_specific_data.asset_check_key.asset_key.to_user_string()}:{e.event_specific_data.check_name}":
            e.event_specific_data.passed for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def _meta(result, asset: str, key: str):
    return [m.metadata[key].value for m in result.asset_materializations_for_node(asset) if key in m.metadata][-1]


def _con(config: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(load_settings(config).duckdb_path), read_only=True)


def test_retrieval_eval_group_generates_once(tmp_path):
    """Both datasets, all nine methods with generated expansions (fake LLM): tables, checks, then a cached re-run."""
    data = tmp_path / "data"
    _personabench(data)
    _longmemeval(data)
    config = _eval_config(tmp_path, data, expansion_source="generate")
    result = _materialize(config)
    checks = _checks(result)
    assert result.success and len(checks) == 6 and all(checks.values()), checks
    assert _meta(result, "query_expansions", "generated_now") == 2 * 5 + 5 * 5 + 2 * 2 + 5 * 2  # P-PRF + QE prompts
    with _con(config) as con:
        segs = dict(con.execute("SELECT dataset, count(*) FROM personal_segments GROUP BY dataset").fetchall())
        qs = dict(con.execute("SELECT dataset, count(*) FROM personal_questions GROUP BY dataset").fetchall())
        cats = {c for (c,) in con.execute("SELECT category FROM personal_questions").fetchall()}
        exp = con.execute("SELECT dataset, method, source, count(*) FROM query_expansions GROUP BY ALL").fetchall()
        fallbacks = {f for (f,) in con.execute("SELECT DISTINCT parse_fallback FROM query_expansions").fetchall()}
        runs = con.execute("SELECT dataset, method, count(DISTINCT q_id), max(rank) FROM retrieval_runs "
                           "GROUP BY ALL").fetchall()
        ev = con.execute("SELECT * FROM retrieval_evaluation").df()
    assert segs == {"personabench": 14, "longmemeval": 8} and qs == {"personabench": 5, "longmemeval": 2}
    assert cats == {"Basic information", "Preference hard", "Preference easy", "Social", "single-session-user"}
    assert {(d, m) for d, m, _, _ in exp} == {(d, m) for d in qs for m in ("p_prf", *QE_METHODS)}
    assert {s for _, _, s, _ in exp} == {"fake:v1"} and fallbacks <= {"json", "json_object", "lines", "empty", "text",
                                                                       "python"}
    assert {(d, m): (n, k) for d, m, n, k in runs} == {
        (d, m): (qs[d], 7 if d == "personabench" else 4) for d in qs for m in PBR_METHODS | QE_METHODS}
    assert set(ev["k"]) == {1, 3, 5, 10} and ev["value"].between(0, 1).all()
    assert set(ev[ev["dataset"] == "longmemeval"]["metric"]) == {"recall", "recall_any", "ndcg"}
    assert "PBR w/o P-Anchor" in _meta(result, "retrieval_evaluation", "markdown")
    table = _meta(result, "retrieval_evaluation", "table")  # a Dagster table: it reads as a table in the UI
    assert {r.data["method"] for r in table.records} >= {"base", "pbr"} and len(table.records) == len(ev)
    assert (tmp_path / "home" / "reports" / "retrieval_evaluation.md").read_text().startswith("**personabench")

    again = _materialize(config)
    assert again.success and all(_checks(again).values())
    assert _meta(again, "query_expansions", "generated_now") == 0
    assert _meta(again, "segment_embeddings", "newly_embedded") == 0


def test_auto_replays_personabench_and_generates_longmemeval(tmp_path):
    """Default settings (expansion_source = auto): PersonaBench P-PRF replayed from the cached file, LongMemEval's
    generated with the configured LLM, QE baselines skipped."""
    data = tmp_path / "data"
    _personabench(data)
    _longmemeval(data)
    result = _materialize(_eval_config(tmp_path, data))
    assert result.success and all(_checks(result).values())
    with _con(tmp_path / "prag.toml") as con:
        exp = con.execute("SELECT DISTINCT dataset, method, source FROM query_expansions ORDER BY 1").fetchall()
        methods = con.execute("SELECT dataset, list(DISTINCT method ORDER BY method) FROM retrieval_runs "
                              "GROUP BY dataset").fetchall()
    assert exp[0] == ("longmemeval", "p_prf", _meta(result, "query_expansions", "generator"))
    assert exp[1] == ("personabench", "p_prf", "replay:pbr_cached_expansions.json") and len(exp) == 2
    assert dict(methods) == {"personabench": sorted(PBR_METHODS), "longmemeval": sorted(PBR_METHODS)}


def test_replay_only_calls_no_llm(tmp_path):
    """expansion_source = replay: no LLM call at all; LongMemEval (nothing to replay) runs Base and w/o P-PRF."""
    data = tmp_path / "data"
    _personabench(data)
    _longmemeval(data)
    result = _materialize(_eval_config(tmp_path, data, expansion_source="replay"))
    assert result.success and all(_checks(result).values())
    assert _meta(result, "query_expansions", "generator") == "none (replay only)"
    with _con(tmp_path / "prag.toml") as con:
        exp = con.execute("SELECT DISTINCT dataset, method, source FROM query_expansions").fetchall()
        methods = con.execute("SELECT dataset, list(DISTINCT method ORDER BY method) FROM retrieval_runs "
                              "GROUP BY dataset").fetchall()
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert exp == [("personabench", "p_prf", "replay:pbr_cached_expansions.json")]
    assert dict(methods) == {"personabench": sorted(PBR_METHODS), "longmemeval": ["base", "pbr_wo_prf"]}
    assert "generation_cache" not in tables


def test_group_skips_without_real_data_and_fails_on_a_bad_folder(tmp_path):
    """No data.real_data_dir: nothing runs or is written. A folder without the datasets: a clear failure."""
    config = write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake")
    result = _materialize(config)
    assert result.success and not result.get_asset_materialization_events() and not _checks(result)
    assert not load_settings(config).duckdb_path.exists()

    bad = _eval_config(tmp_path, tmp_path / "nowhere")
    result = _materialize(bad, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "none of the datasets" in failure.event_specific_data.error.to_string()


def test_every_dataset_of_an_asset_lands_in_one_transaction(tmp_path, monkeypatch):
    """personal_corpora reads and parses both datasets first, then writes segments and questions of both in one
    transaction: a failure at its last write leaves both tables as the previous run wrote them."""
    data = tmp_path / "data"
    _personabench(data)
    _longmemeval(data)
    config = _eval_config(tmp_path, data)
    corpora = dg.AssetSelection.assets("personal_corpora")
    assert _materialize(config, selection=corpora).success
    tables = ("personal_segments", "personal_questions")

    def rows() -> dict[str, list]:
        with _con(config) as con:
            return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in tables}

    before = rows()
    conversations = data / "personabench" / "community_1" / "private_data" / "noise_0.0" / "conversation_data_all.json"
    edited = json.loads(conversations.read_text(encoding="utf-8"))
    edited[0]["Data"][0]["Conversations"][0]["conversation"][0]["content"] = "I took up pottery instead"
    _write(conversations, edited)
    monkeypatch.setenv("PRAG_FAULT", "table_write@personal_questions:raise")
    assert not _materialize(config, raise_on_error=False, selection=corpora).success
    assert rows() == before
    monkeypatch.delenv("PRAG_FAULT")
    assert _materialize(config, selection=corpora).success
    after = rows()
    assert after["personal_questions"] == before["personal_questions"]
    assert any("pottery" in str(r) for r in after["personal_segments"]) and after != before


def test_the_group_logic_runs_without_dagster(tmp_path):
    """prag_models builds each table's rows of one dataset from a DuckDB file alone (no Dagster context)."""
    from prag_models.stages import real_data_build as build
    from prag_models.storage.store import replace_many

    data = tmp_path / "data"
    _longmemeval(data)
    settings = load_settings(_eval_config(tmp_path, data, datasets=["personabench", "longmemeval"]))
    warnings: list[str] = []
    assert build.configured_datasets(settings, warnings.append) == ["longmemeval"]
    assert warnings and "personabench" in warnings[0]
    segments, questions, stats = build.corpora_rows(settings, "longmemeval")
    assert stats["questions"] == 2 and set(questions["q_id"]) == {"q1", "q2"}  # the abstention question is skipped
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    replace_many(con, [("personal_segments", segments, {"dataset": "longmemeval"}),
                       ("personal_questions", questions, {"dataset": "longmemeval"})])
    with pytest.raises(ValueError, match="materialize segment_embeddings first"):
        build.seeded_cache(con, "longmemeval", settings, lambda: None)


@pytest.mark.realdata
def test_real_personabench_replay(personabench_graph):
    """Community 1 with the PBR authors' cached expansions: Base Overall R@5 = 0.4039 and nDCG@5 = 0.3193 (the
    library's figures, benchmarks/pbr_personabench.py), PBR at the authors' settings and without its anchor above."""
    config, result = personabench_graph
    assert all(_checks(result).values())
    with _con(config) as con:
        rows = con.execute("SELECT method, metric, value FROM retrieval_evaluation WHERE category = 'Overall' "
                           "AND k = 5 AND dataset = 'personabench'").fetchall()  # fmt: skip
        n = con.execute("SELECT max(n_questions) FROM retrieval_evaluation").fetchone()[0]
    r5 = {method: value for method, metric, value in rows if metric == "recall"}
    ndcg = {method: value for method, metric, value in rows if metric == "ndcg"}
    assert n == 114 and set(r5) == PBR_METHODS | {"pbr@default"}
    assert r5["base"] == pytest.approx(0.4039, abs=0.003) and ndcg["base"] == pytest.approx(0.3193, abs=0.003)
    assert r5["pbr@default"] > r5["base"] and r5["pbr_wo_anchor"] > r5["base"]


def test_personabench_pools_every_community_and_reports_each(tmp_path):
    """A second community folder laid out like the first: both loaded (ids prefixed, no collision), evaluated per
    community and pooled; pooled n = the sum; every row has a 95 % interval."""
    import shutil

    data = tmp_path / "data"
    _personabench(data)
    shutil.copytree(data / "personabench" / "community_1", data / "personabench" / "community_2")
    config = _eval_config(tmp_path, data, datasets=["personabench"])
    result = _materialize(config)
    assert result.success and all(_checks(result).values())
    with _con(config) as con:
        qs = [q for (q,) in con.execute("SELECT q_id FROM personal_questions").fetchall()]
        ev = con.execute("SELECT * FROM retrieval_evaluation WHERE category = 'Overall' AND metric = 'recall' "
                         "AND k = 5 AND method = 'pbr'").df().set_index("dataset")
    assert len(qs) == 10 and len(set(qs)) == 10 and {q.split("/")[0] for q in qs} == {"community_1", "community_2"}
    assert set(ev.index) == {"personabench", "personabench[community_1]", "personabench[community_2]"}
    assert ev.loc["personabench", "n_questions"] == 10 and ev.loc["personabench[community_2]", "n_questions"] == 5
    assert ((ev["ci_low"] <= ev["value"]) & (ev["value"] <= ev["ci_high"])).all()
    assert "personabench[community_2]: Overall (5 questions" in _meta(result, "retrieval_evaluation", "markdown")
    with pytest.raises(Exception, match="no noise level 0.3"):
        _materialize(_eval_config(tmp_path, data, datasets=["personabench"], personabench_noise="0.3"))
    one = _eval_config(tmp_path, data, datasets=["personabench"], personabench_communities=["community_2"])
    assert _materialize(one).success


def test_pbr_lamp_option(tmp_path):
    """pbr / pbr_anchor_only on one task of a tiny demo (fake LLM): own-profile documents, check passes, pbr's rows
    flow into generations and lamp_evaluation; a re-run generates no P-PRF prompt."""
    from prag_assets.assets import embeddings, evaluation, generation, lamp_data, pbr_lamp

    config = write_config(tmp_path / "prag.toml", tmp_path / "home", generator_backend="fake",
                          data={"tasks": ["LaMP-2"], "demo_users": 12, "demo_dev_samples": 3})
    selection = dg.AssetSelection.assets(
        lamp_data.lamp_samples, lamp_data.profile_documents, embeddings.document_embeddings,
        embeddings.query_embeddings, pbr_lamp.pbr_lamp_retrievals, generation.generations, evaluation.lamp_evaluation)
    result = materialize_graph(config, ["LaMP-2"], selection=selection)
    checks = _checks(result)
    assert result.success and checks["pbr_lamp_retrievals:docs_from_own_profile"] and all(checks.values()), checks
    stats = partition_metadata(result, "pbr_lamp_retrievals")["LaMP-2"]
    assert stats["p_prf_prompts"] == 2 * 3 and stats["generated_now"] == stats["p_prf_prompts"]
    with _con(config) as con:
        rows = con.execute("SELECT method, sample_id, user_id, source_user_id, rank FROM pbr_lamp_retrievals").df()
        evaluated = {m for (m,) in con.execute("SELECT DISTINCT method FROM lamp_evaluation").fetchall()}
    assert set(rows["method"]) == {"pbr", "pbr_anchor_only"} and (rows["user_id"] == rows["source_user_id"]).all()
    assert rows.groupby("method")["sample_id"].nunique().to_dict() == {"pbr": 3, "pbr_anchor_only": 3}
    assert rows["rank"].max() == 2  # retrieval.k of the tiny config
    # anchor-only (no LLM) is always retrieved and scored by the retrieval evaluation; the default LLM evaluation
    # generates for pbr only
    assert "pbr" in evaluated and "pbr_anchor_only" not in evaluated

    again = materialize_graph(config, ["LaMP-2"], selection=dg.AssetSelection.assets(pbr_lamp.pbr_lamp_retrievals))
    assert again.success and _meta(again, "pbr_lamp_retrievals", "generated_now") == 0


def test_cli_runs_the_group_in_a_second_run_when_configured(tmp_path, monkeypatch, capsys):
    """`prag materialize`: the LaMP graph with a task range, then group retrieval_eval (unpartitioned) if configured."""
    from prag_assets.cli import commands as cli
    from prag_assets.cli import run_summary

    calls = []
    def watch(settings, cmd, *_):
        calls.append(cmd)
        return 0, run_summary.RunSummary()

    monkeypatch.setattr(run_summary, "watch", watch)
    monkeypatch.setenv("PRAG_CONFIG", str(_eval_config(tmp_path, tmp_path / "data")))
    assert cli.main(["materialize"]) == 0
    first, second = calls
    assert first[first.index("--job") + 1] == "prag_demo" and "--partition-range" in first  # demo_job.py's selection
    assert second[second.index("--job") + 1] == "prag_retrieval_eval" and "--partition-range" not in second

    calls.clear()
    plain = write_config(tmp_path / "plain.toml", tmp_path / "home", generator_backend="fake")  # no LLM to time
    monkeypatch.setenv("PRAG_CONFIG", str(plain))
    assert cli.main(["materialize"]) == 0 and len(calls) == 1
    assert "retrieval evaluation is skipped" in capsys.readouterr().out
