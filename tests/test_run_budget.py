"""One time budget for the main job (issue 47): the split of run.budget_s on a machine's measured speeds, and the
utility's whole tests funded in order (a task is funded with its pilot and smallest deciding test, or not at all)."""

from __future__ import annotations

import pytest

from prag_models.config.settings import load_settings
from prag_models.evaluation.run_budget import REST_PER_EMBED_BY_BACKEND, REST_PER_EMBED_S, split_budget
from prag_models.stages.utility_funding import fund_whole_tests, prompts_needed, utility_share


def _settings(backend: str = "torch", **run):
    return load_settings(environ={}, home="/nonexistent", run=run, embedder={"backend": backend})


def test_a_fast_machine_keeps_the_llm_cap_and_the_probe_gets_the_rest() -> None:
    s = _settings(budget_s=900, llm_budget_s=360)
    fast = split_budget(s, documents=6000, docs_per_s=150.0, measured_s=20.0)  # 40 s of embedding
    assert fast.llm_s == 360 and fast.feedback_s == pytest.approx(900 - 20 - 40 * (1 + REST_PER_EMBED_S) - 360)


def test_a_slow_machine_gives_the_llm_what_the_graph_leaves_and_the_probe_nothing() -> None:
    s = _settings(budget_s=900, llm_budget_s=360)
    slow = split_budget(s, documents=6000, docs_per_s=24.0, measured_s=60.0)  # 250 s of embedding
    assert slow.llm_s == pytest.approx(max(0.0, 900 - 60 - 250 * (1 + REST_PER_EMBED_S))) and slow.feedback_s == 0
    assert "the CFRAG feedback probe 0 s" in " ".join(slow.lines())
    unlimited = split_budget(_settings(budget_s=0, llm_budget_s=360), 6000, 24.0)
    assert unlimited.llm_s == 360 and unlimited.feedback_s == -1  # no whole-run budget: the probe is not limited


def test_a_faster_embedder_backend_does_not_shrink_the_rest_of_the_graph() -> None:
    """The int8 ONNX embedder is faster than torch, the graph's other torch work is not: its ratio is larger, so the
    estimate of the rest stays what the proxy measured (236 s, not 171 s)."""
    torch_run = split_budget(_settings(budget_s=900), documents=6000, docs_per_s=80.0)
    int8_run = split_budget(_settings("onnx_int8", budget_s=900), documents=6000, docs_per_s=80.0)
    assert torch_run.rest_s == pytest.approx(75 * REST_PER_EMBED_S)
    assert int8_run.rest_s == pytest.approx(75 * REST_PER_EMBED_BY_BACKEND["onnx_int8"])
    assert int8_run.rest_s > torch_run.rest_s


def test_whole_tests_are_funded_in_order_and_the_rest_waits() -> None:
    s = _settings()
    labelled = {"LaMP-1": True, "LaMP-2": True, "LaMP-4": False}
    per_prompt = 2.0
    free = prompts_needed(False, s) * per_prompt  # the label-free task first: the utility is its only evidence
    one = prompts_needed(True, s) * per_prompt
    budgets = fund_whole_tests(labelled, s, free + one + one / 2, per_prompt)
    assert budgets["LaMP-4"] >= free and budgets["LaMP-1"] >= one and budgets["LaMP-2"] == 0  # not half a test
    assert sum(budgets.values()) == pytest.approx(free + one + one / 2)  # what is left goes to the funded tasks
    done = fund_whole_tests(labelled, s, one, per_prompt, complete=frozenset({"LaMP-4"}))
    assert done["LaMP-4"] == 0 and done["LaMP-1"] == pytest.approx(one)  # a completed test is answered from cache
    unmeasured = fund_whole_tests(labelled, s, 100.0, 0.0)  # no measured speed: every task by weight, as before
    assert all(v > 0 for v in unmeasured.values())


def test_the_evidence_run_funds_tasks_with_no_test_before_extending_a_cut_one() -> None:
    s = _settings()
    labelled = {"LaMP-1": True, "LaMP-2": True}
    one = prompts_needed(True, s) * 2.0
    budgets = fund_whole_tests(labelled, s, one, 2.0, decided=frozenset({"LaMP-1"}))
    assert budgets["LaMP-2"] == pytest.approx(one) and budgets["LaMP-1"] == 0


def test_the_run_ends_by_saying_what_its_budget_did_not_pay(tmp_path) -> None:
    import duckdb
    import pandas as pd

    from prag_assets.cli.budget import budget_cuts

    s = load_settings(environ={}, home=str(tmp_path), data={"tasks": ["LaMP-2", "LaMP-5"]})
    plans = pd.DataFrame({"task": ["LaMP-2", "LaMP-5"], "evidence": ["labels chose", "deferred"],
                          "budget_s": [30.0, 141.0]})  # fmt: skip
    probes = pd.DataFrame({"task": ["LaMP-2", "LaMP-5"], "decision": ["not_measured", "continued"]})
    with duckdb.connect(str(tmp_path / "t.duckdb")) as con:
        assert budget_cuts(con, s, "not_measured", "feedback_probe") == []  # nothing stored: nothing to say
        con.register("p", plans)
        con.register("q", probes)
        con.execute("CREATE TABLE llm_utility_plans AS SELECT * FROM p")
        con.execute("CREATE TABLE feedback_probe AS SELECT * FROM q")
        deferred, probe = budget_cuts(con, s, "not_measured", "feedback_probe")
    assert "LLM evidence of LaMP-5" in deferred and "141 s" in deferred and "prag evidence" in deferred
    assert "probe of LaMP-2 was not measured" in probe


@pytest.mark.parametrize("bad", ["-5", "soon", "nan"])
def test_prag_evidence_refuses_a_budget_that_is_not_seconds(bad, capsys) -> None:
    from prag_assets.cli.commands import main

    with pytest.raises(SystemExit) as exit_info:
        main(["evidence", "--budget", bad])
    assert exit_info.value.code == 2 and "--budget" in capsys.readouterr().err


def test_the_utility_takes_the_generations_seconds_when_they_are_deferred() -> None:
    """Whole figures or none: a run whose budget deferred the generated outputs gives their share to the utility."""
    s = _settings()
    deferred = s.model_copy(update={"run": s.run.model_copy(update={"generation_samples": 0})})
    assert utility_share(s) == s.utility.budget_share < 1.0 and utility_share(deferred) == 1.0


def test_tasks_no_label_sees_get_the_search_by_the_utility_after_the_llm_evaluation_and_before_the_probe() -> None:
    """Issue 47 (the label-free path on a slow machine): the search of knobs by the LLM utility (up to 240 s a task,
    1.5x for CFRAG's and ClusterRAG's searches) was outside the budget, 4 tasks x 360 s on the one-core proxy; now it
    gets what the LLM evaluation leaves, at most its configured seconds, and the probe the rest."""
    from prag_models.evaluation.run_budget import label_free_tasks, utility_search_s

    s = _settings(budget_s=900, llm_budget_s=360)
    assert label_free_tasks(s) == [] and utility_search_s(s) == pytest.approx(1.5 * s.tuning.utility_budget_s)
    lamp = s.model_copy(update={"data": s.data.model_copy(update={"source": "lamp", "lamp_dir": "/x"})})
    assert label_free_tasks(lamp) == ["LaMP-1", "LaMP-4", "LaMP-5", "LaMP-7"]
    plenty = split_budget(s, documents=6000, docs_per_s=150.0, label_free=1)  # 40 s embedding, 88 s the rest
    assert plenty.tuning_s == pytest.approx(360) and plenty.feedback_s == pytest.approx(900 - 40 - 88 - 360 - 360)
    tight = split_budget(s, documents=6000, docs_per_s=80.0, label_free=4)  # 75 s embedding, 165 s the rest
    assert tight.llm_s == 360 and tight.tuning_s == pytest.approx(900 - 75 - 165 - 360) and tight.feedback_s == 0
    assert "tuning without labels 300 s" in " ".join(tight.lines())
    assert split_budget(s, 6000, 80.0).tuning_s == 0  # no task without labels: nothing reserved


def test_the_search_by_the_utility_is_cut_to_its_share_or_not_run_below_two_trials(capsys) -> None:
    """sized_tuning: the run's cut is run configuration (run.utility_tuning_s, no code version moves) and said; below
    two trials a method (the default and one other) the search is not run and the defaults are kept."""
    from prag_assets.cli.budget import sized_tuning
    from prag_models.evaluation.utility_objective import label_free_plan, utility_search_budget_s

    s = _settings(budget_s=900, llm_budget_s=360)
    tasks = ["LaMP-4", "LaMP-7"]
    assert sized_tuning(s, tasks, 2 * 360, 0.4).run.utility_tuning_s == -1  # the whole search fits: no cut
    cut = sized_tuning(s, tasks, 360, 0.4)  # half of it: 120 s a task
    assert cut.run.utility_tuning_s == pytest.approx(120) and utility_search_budget_s(cut) == pytest.approx(120)
    assert cut.tuning == s.tuning  # the tuning section (hashed into code versions) is untouched
    assert "at most 120 s a task" in capsys.readouterr().out
    none = sized_tuning(s, tasks, 100, 0.9)  # 33 s a task, 17 s a method: less than 2 trials of 24 prompts at 0.9 s
    assert none.run.utility_tuning_s == 0 and "the default knobs are kept" in capsys.readouterr().out
    fake = type("G", (), {"can_score_choices": True})()
    ok, why = label_free_plan("LaMP-7", none, fake)
    assert not ok and "run.budget_s" in why
