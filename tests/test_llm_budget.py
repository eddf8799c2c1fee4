"""A time budget for LLM work (issue 28): the LLM-evaluation samples in a fixed seeded order (a larger count only adds
samples), the count the budget pays for, and the plan stored and reused by later runs."""

from __future__ import annotations

from prag_models.config.settings import load_settings
from prag_models.data.source import llm_eval_sample_ids
from prag_models.evaluation.llm_budget import Throughput, measure, plan, plan_run, probe_prompts
from prag_models.llm.fake import FakeGenerator


def _settings(**data):
    return load_settings(environ={}, data={"tasks": ["LaMP-2", "LaMP-5"], **data})


def test_a_larger_count_only_adds_samples_in_a_seeded_order() -> None:
    ids = [f"s{i:03d}" for i in range(40)]
    taken = [llm_eval_sample_ids(ids, _settings(llm_eval_samples=n)) for n in (1, 3, 8, 40, 0)]
    assert [len(t) for t in taken] == [1, 3, 8, 40, 40]
    assert all(set(a) <= set(b) for a, b in zip(taken, taken[1:], strict=False))
    assert taken[2] == sorted(taken[2]) and taken[2] != ids[:8]  # seeded, not the first ids
    assert llm_eval_sample_ids(reversed(ids), _settings(llm_eval_samples=8)) == taken[2]


def test_the_budget_sizes_the_count_and_never_exceeds_the_configured_one() -> None:
    t = Throughput(scored_s=0.5, generated_s=1.0, prompt_tokens_per_s=1000.0, measured_in_s=3.0, pbr_s=1.0)
    s = _settings(llm_eval_samples=8)
    methods = len(s.retrieval.methods)
    # LaMP-2 is label-scored with llama.cpp, LaMP-5 generated; P-PRF = 2 generations per task when pbr is configured
    per_sample = methods * 0.5 + methods * 1.0 + (4 * 1.0 if "pbr" in s.retrieval.methods else 0.0)
    left = 1 - s.utility.budget_share  # the utility takes its share first (docs/methods.md §6.7)
    chosen = [plan(s.model_copy(update={"run": s.run.model_copy(update={"llm_budget_s": b / left})}), t) for b in
              (1.0, 3 * per_sample, 5.5 * per_sample, 1000 * per_sample)]  # fmt: skip
    assert abs(chosen[0].per_sample_s - per_sample) < 1e-9
    # issue 47: data.llm_eval_samples whole or none, never a figure of fewer samples than configured
    assert [p.chosen for p in chosen] == [0, 0, 0, 8]
    assert [p.generation_samples for p in chosen] == [0, 0, 0, -1]
    assert chosen[1].deferred and "deferred to `prag evidence`" in chosen[1].line() and not chosen[3].cut
    no_utility = s.model_copy(update={"utility": s.utility.model_copy(update={"enabled": False}),
                                      "run": s.run.model_copy(update={"llm_budget_s": 8 * per_sample})})
    assert plan(no_utility, t).chosen == 8  # without the utility the whole budget is the generations'
    every = s.model_copy(update={"data": s.data.model_copy(update={"llm_eval_samples": 0}),
                                 "run": s.run.model_copy(update={"llm_budget_s": 3 * per_sample / left})})
    assert plan(every, t).chosen == 3 and plan(every, t).generation_samples == 3  # "all": as many as fit


def test_a_run_the_budget_defers_takes_no_llm_evaluation_sample() -> None:
    """run.generation_samples = 0 (the budget deferred the generated outputs and P-PRF): no sample; -1: the
    configured count; N: at most N."""
    ids = [f"s{i:03d}" for i in range(40)]
    s = _settings(llm_eval_samples=8)
    counts = [len(llm_eval_sample_ids(ids, s.model_copy(update={"run": s.run.model_copy(
        update={"generation_samples": g})}))) for g in (-1, 0, 3, 20)]  # fmt: skip
    assert counts == [8, 0, 3, 8]


def test_the_speeds_are_measured_once_per_machine_and_generator_and_the_plan_follows_the_settings(tmp_path) -> None:
    s = _settings(llm_eval_samples=4)
    t = measure(FakeGenerator(), s)
    assert t.generated_s >= 0 and t.measured_in_s < 5
    loaded = []

    def make():
        loaded.append(1)
        return FakeGenerator()

    first, reused = plan_run(s, tmp_path / "plan.json", make)
    again, reused_again = plan_run(s, tmp_path / "plan.json", make)
    assert (reused, reused_again, len(loaded)) == (False, True, 1) and again.chosen == first.chosen == 4
    other = _settings(llm_eval_samples=3)  # another plan from the stored speeds: nothing measured again
    assert plan_run(other, tmp_path / "plan.json", make)[0].chosen == 3 and len(loaded) == 1
    slower = other.model_copy(update={"generator": other.generator.model_copy(update={"threads": 1})})
    assert plan_run(slower, tmp_path / "plan.json", make)[0].chosen == 3 and len(loaded) == 2  # measured again


def test_the_probe_times_the_tasks_own_prompts_not_the_maximal_length(tmp_path) -> None:
    """The estimate was an upper bound (every prompt at prompt.max_prompt_tokens: 130 s a sample against 44 s
    measured on the demo, which cut the LLM evaluation to one sample); the probe now builds each task's prompts from
    its dev samples as the evaluation does."""
    data = {"tasks": ["LaMP-2", "LaMP-4"], "demo_users": 16, "demo_dev_samples": 4}
    s = load_settings(environ={}, home=str(tmp_path), data=data)
    generator = FakeGenerator()
    prompts = probe_prompts(generator, s)
    assert prompts.realistic and set(prompts.answers) == {"LaMP-2", "LaMP-4"}
    for task, (prompt,) in prompts.answers.items():
        assert "please select the tag" in prompt if task == "LaMP-2" else "headline" in prompt
        assert generator.count_tokens(prompt) < s.prompt.max_prompt_tokens
    assert all(len(p) == 2 for p in prompts.pbr.values())  # P-PRF: utterances and reasoning
    t = measure(generator, s, prompts)
    assert t.realistic and t.pbr_s >= 0 and "the tasks' own prompts" in plan(s, t).line()


def test_without_readable_data_the_probe_times_the_bound_and_says_so(tmp_path) -> None:
    s = load_settings(environ={}, home=str(tmp_path),
                      data={"tasks": ["LaMP-2"], "source": "lamp", "lamp_dir": str(tmp_path / "missing")})  # fmt: skip
    t = measure(FakeGenerator(), s)
    assert not t.realistic and "synthetic prompts of the maximal length" in plan(s, t).line()


def test_a_plan_stored_by_the_maximal_length_measurement_is_measured_again(tmp_path) -> None:
    """A home keeps its plan while the settings stay; a plan of the old measurement (key without PLAN_VERSION, 130 s
    a sample on the demo) must not keep cutting the evaluation to one sample after an upgrade."""
    import json

    from prag_models.evaluation.llm_budget import plan_key, stored_plan

    s = _settings(llm_eval_samples=4)
    t = Throughput(scored_s=2.0, generated_s=1.9, prompt_tokens_per_s=421.0, measured_in_s=5.3)
    old_key = json.dumps(json.loads(plan_key(s))[1:], sort_keys=True)
    path = tmp_path / "llm_budget.json"
    path.write_text(json.dumps({**plan(s, t).metadata(), "key": old_key}), encoding="utf-8")
    assert stored_plan(path, s) is None
    path.write_text(json.dumps(plan(s, t).metadata()), encoding="utf-8")
    assert stored_plan(path, s) is not None


def test_on_a_slow_machine_the_measurement_stops_once_each_kind_is_timed(tmp_path, monkeypatch) -> None:
    """Timing every probe prompt took 826 s of a 240 s budget on a loaded machine: past the cap (a share of the
    budget) no more prompts are timed, once each kind the tasks need (label-scored, generated) was timed once."""
    import time

    from prag_models.evaluation import llm_budget

    class Slow(FakeGenerator):
        """A generator whose every call takes 50 ms, counting its calls by kind."""

        def __init__(self) -> None:
            super().__init__()
            self.timed: list[str] = []

        def generate(self, prompts, max_new_tokens):  # noqa: ANN001, ANN201
            time.sleep(0.05)
            self.timed.append("generated")
            return super().generate(prompts, max_new_tokens)

        def score_choices(self, prompts, choices):  # noqa: ANN001, ANN201
            time.sleep(0.05)
            self.timed.append("scored")
            return super().score_choices(prompts, choices)

    data = {"tasks": ["LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4", "LaMP-5"], "demo_users": 16, "demo_dev_samples": 4}
    s = load_settings(environ={}, home=str(tmp_path), data=data)
    generator = Slow()
    prompts = probe_prompts(generator, s)
    monkeypatch.setattr(llm_budget, "MEASURE_MIN_S", 0.0)
    monkeypatch.setattr(llm_budget, "MEASURE_SHARE", 0.0)  # the cap is passed after the first timed prompt
    t = measure(generator, s, prompts)
    # warm-up, LaMP-1 scored (cap passed, no generated prompt yet), LaMP-2 and LaMP-3 scored too: the loop moves on
    # until LaMP-4 is generated, then stops; then the fresh-prompt call, one utility prompt (scored) and one P-PRF
    assert generator.timed.count("scored") == 3 + 1 and t.scored_s > 0.04 and t.generated_s > 0.04
    assert t.utility_s > 0.04 and t.per_utility_prompt() == t.utility_s
    pbr = 1 if "pbr" in s.retrieval.methods else 0
    assert generator.timed.count("generated") == 1 + 1 + 1 + pbr  # warm-up, LaMP-4, fresh prompt, P-PRF
    monkeypatch.setattr(llm_budget, "MEASURE_MIN_S", 1000.0)
    generator.timed.clear()
    measure(generator, s, prompts)
    assert generator.timed.count("scored") == 3 + 1  # every prompt, below, and the utility prompt
    assert generator.timed.count("generated") == 1 + 2 + 1 + 4 * pbr
