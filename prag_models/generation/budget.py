"""A time budget for the LLM work of a run (issue 28): measure the generator on prompts of the configured length (a
few seconds), estimate the seconds one LLM-evaluation sample costs over every task (one prompt per method, label
scoring or generation as the task answers, plus P-PRF's two generations), and take as many samples as the budget
pays for, never more than data.llm_eval_samples. The retrieval evaluation is not concerned: it keeps every sample."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prag_models.config.settings import Settings
from prag_models.data.tasks import LABELS
from prag_models.generation.answers import LABEL_SCORING, answer_mode

#: Prompts timed per answer mode (after one warm-up call): about 4 s in all with the packaged model on 2 free cores.
PROBE_PROMPTS = 1


@dataclass(frozen=True)
class Throughput:
    """Measured seconds per prompt of the configured length: label-scored, generated (task budget), prompt tokens/s."""

    scored_s: float
    generated_s: float
    prompt_tokens_per_s: float
    measured_in_s: float


@dataclass(frozen=True)
class LlmPlan:
    """How many LLM-evaluation samples per task the budget pays for, and what was cut."""

    budget_s: float
    per_sample_s: float
    chosen: int
    limit: int  # data.llm_eval_samples before the budget (0 = all)
    throughput: Throughput
    key: str = ""  # what the plan depends on (plan_key): a stored plan is reused while it is the same

    @property
    def cut(self) -> bool:
        """Whether the budget lowered the configured count."""
        return self.limit <= 0 or self.chosen < self.limit

    def line(self) -> str:
        """One line saying what the budget chose and cut."""
        t = self.throughput
        limit = "all" if self.limit <= 0 else str(self.limit)
        cut = (f"cut from {limit}" if self.cut else f"the configured {limit} fit")
        return (f"LLM budget {self.budget_s:.0f} s (run.llm_budget_s): generator {t.prompt_tokens_per_s:,.0f} prompt "
                f"tokens/s, {t.scored_s:.2f} s a scored and {t.generated_s:.2f} s a generated prompt (measured in "
                f"{t.measured_in_s:.1f} s) -> about {self.per_sample_s:.0f} s per sample over the tasks: the LLM "
                f"evaluation and P-PRF take {self.chosen} samples per task ({cut}); the retrieval evaluation keeps "
                "every dev sample")  # fmt: skip

    def metadata(self) -> dict[str, Any]:
        """The plan as a JSON-able dict."""
        return {"budget_s": self.budget_s, "per_sample_s": round(self.per_sample_s, 2), "chosen": self.chosen,
                "limit": self.limit, "key": self.key,
                "throughput": {k: round(v, 3) for k, v in asdict(self.throughput).items()}}  # fmt: skip


def _prompt(generator: Any, tokens: int, salt: int) -> str:
    """A prompt of about ``tokens`` tokens (distinct per salt, so no cache or prefix reuse helps)."""
    words = " ".join(f"word{salt}x{i} history document text" for i in range(tokens))
    return generator.truncate(f"Profile {salt}: {words}", tokens) + "\nAnswer:"


def measure(generator: Any, settings: Settings) -> Throughput:
    """Seconds per label-scored and per generated prompt of prompt.max_prompt_tokens tokens (the longest the
    evaluation sends: an upper bound), after a warm-up."""
    started = time.perf_counter()
    length, new = settings.prompt.max_prompt_tokens, settings.generator.max_new_tokens
    generator.generate([_prompt(generator, 16, -1)], 1)  # warm-up: allocation, first kernels
    salt = 0

    def timed(call) -> float:  # noqa: ANN001 - a callable of one prompt
        nonlocal salt
        t0 = time.perf_counter()
        for _ in range(PROBE_PROMPTS):
            salt += 1
            call(_prompt(generator, length, salt))
        return (time.perf_counter() - t0) / PROBE_PROMPTS

    one_token = timed(lambda p: generator.generate([p], 1))
    generated = timed(lambda p: generator.generate([p], new))
    scored = generated
    if getattr(generator, "can_score_choices", False):
        labels = list(max(LABELS.values(), key=len))  # the longest label list (LaMP-2's tags): an upper bound
        scored = timed(lambda p: generator.score_choices([p], labels))
    tps = length / max(one_token, 1e-6)
    return Throughput(scored, generated, tps, time.perf_counter() - started)


def per_sample_seconds(settings: Settings, t: Throughput) -> float:
    """Seconds one LLM-evaluation sample costs over every configured task: a prompt per method (label-scored where
    the task answers by label scoring, else generated) and P-PRF's two generations where pbr is configured."""
    methods = settings.retrieval.methods
    total = 0.0
    for task in settings.data.tasks:
        mode = answer_mode(task, settings.generator)
        prompt_s = t.scored_s if mode == LABEL_SCORING else t.generated_s  # shorter label generations: a bound
        total += len(methods) * prompt_s + (2 * t.generated_s if "pbr" in methods else 0.0)
    return total


def plan(settings: Settings, t: Throughput) -> LlmPlan:
    """The largest sample count the budget pays for (at least 1, at most data.llm_eval_samples when that is set)."""
    per_sample, limit = per_sample_seconds(settings, t), settings.data.llm_eval_samples
    fits = int(settings.run.llm_budget_s // per_sample) if per_sample > 0 else 10**9
    chosen = max(1, fits if limit <= 0 else min(limit, fits))
    return LlmPlan(settings.run.llm_budget_s, per_sample, chosen, limit, t, plan_key(settings))


def plan_key(settings: Settings) -> str:
    """What a plan depends on besides the machine: budget, limit, tasks, methods, generator and prompt settings."""
    parts = [settings.run.llm_budget_s, settings.data.llm_eval_samples, list(settings.data.tasks),
             list(settings.retrieval.methods), settings.generator.model_dump(mode="json"),
             settings.prompt.model_dump(mode="json")]  # fmt: skip
    return json.dumps(parts, sort_keys=True)


def stored_plan(path: Path, settings: Settings) -> LlmPlan | None:
    """The plan stored by an earlier run with the same settings (so later runs take the same samples), else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") != plan_key(settings):
            return None
        return LlmPlan(data["budget_s"], data["per_sample_s"], data["chosen"], data["limit"],
                       Throughput(**data["throughput"]), data["key"])  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


def plan_run(settings: Settings, path: Path, make_generator: Callable[[], Any]) -> tuple[LlmPlan, bool]:
    """(the plan of this run, whether it was reused): the stored plan for the same settings, else measure the
    generator (loaded by make_generator, closed after) and store the new plan at path."""
    found = stored_plan(path, settings)
    if found is not None:
        return found, True
    generator = make_generator()
    try:
        new = plan(settings, measure(generator, settings))
    finally:
        generator.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(new.metadata(), indent=1), encoding="utf-8")
    return new, False

