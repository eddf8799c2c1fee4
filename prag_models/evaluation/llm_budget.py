"""A time budget for the LLM work of a run (issue 28): time the generator on each task's own prompts, built from its
dev samples as the evaluation builds them (about ten seconds), estimate the seconds one LLM-evaluation sample costs
over every task (one prompt per method, label scoring or generation as the task answers, plus P-PRF's two
generations), and take as many samples as the budget pays for, never more than data.llm_eval_samples. The retrieval
evaluation is not concerned: it keeps every sample."""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prag_models.config.settings import Settings
from prag_models.data.tasks import LABELS
from prag_models.generation.answers import LABEL_SCORING, answer_mode, max_new_tokens_for

# The measured speeds and where they are kept: prag_models/llm/speeds.py (the methods read them too); re-exported
from prag_models.llm.speeds import Throughput as Throughput
from prag_models.llm.speeds import budget_path as budget_path
from prag_models.llm.speeds import machine_key as machine_key
from prag_models.llm.speeds import stored_throughput as stored_throughput
from prag_models.storage.files import write_json_atomic

log = logging.getLogger(__name__)

#: Dev samples per task whose prompts are timed (after one warm-up call): about 10 s in all over the six tasks with
#: the packaged model on 2 free cores.
PROBE_PROMPTS = 1
#: P-PRF prompts timed in all (their shown history is capped at pbr.lamp_history_tokens, so tasks differ little)
PBR_PROBE_PROMPTS = 4
#: The measurement stops timing more prompts after this share of run.llm_budget_s (at least MEASURE_MIN_S) once each
#: kind of prompt the tasks need was timed once: on a loaded machine timing every probe prompt took 826 s of a 240 s
#: budget (26 prompt tokens/s), and a slow generator is told apart from a fast one by its first prompts.
MEASURE_SHARE = 0.25
MEASURE_MIN_S = 30.0
#: Bump when the measurement changes: a plan stored by an older one is measured again (v2: the tasks' own prompts;
#: a v1 plan timed prompts of the maximal length and would keep cutting the evaluation to one sample).
PLAN_VERSION = "v3"  # v3: seconds per utility prompt timed too (utility_s), the machine key stored



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

    @property
    def deferred(self) -> bool:
        """Whether the budget pays no LLM-evaluation sample: the generated outputs and P-PRF wait for `prag
        evidence`."""
        return self.chosen == 0

    @property
    def generation_samples(self) -> int:
        """run.generation_samples of a run sized by this plan: -1 as configured, 0 deferred, else the cut count."""
        return 0 if self.deferred else -1 if not self.cut or self.chosen >= 10**9 else self.chosen

    def line(self) -> str:
        """One line saying what the budget chose and cut."""
        t = self.throughput
        limit = "all" if self.limit <= 0 else str(self.limit)
        if self.deferred:
            need = f", ≈ {self.per_sample_s * self.limit:.0f} s on this machine" if self.limit > 0 else ""
            return (f"LLM budget: the generated outputs and P-PRF ({limit} samples a task{need}) do not fit the "
                    f"{self.budget_s:.0f} s the utility leaves of run.llm_budget_s: deferred to `prag evidence` "
                    f"(whole figures or none), the utility takes those seconds too; {t.prompt_tokens_per_s:,.0f} "
                    "prompt tokens/s")  # fmt: skip
        cut = f"cut from {limit}" if self.cut else f"the configured {limit} fit"
        kind = "the tasks' own prompts" if t.realistic else "synthetic prompts of the maximal length"
        return (f"LLM budget: {self.chosen} samples per task ({cut}) for {self.budget_s:.0f} s of generated outputs "
                f"and P-PRF (run.llm_budget_s after the utility's share); {t.prompt_tokens_per_s:,.0f} prompt "
                f"tokens/s, {t.scored_s:.2f} s a scored, {t.generated_s:.2f} s a generated, {t.pbr_s:.2f} s a P-PRF "
                f"prompt ({kind}, timed in {t.measured_in_s:.1f} s)")  # fmt: skip

    def metadata(self) -> dict[str, Any]:
        """The plan as a JSON-able dict."""
        return {"budget_s": self.budget_s, "per_sample_s": round(self.per_sample_s, 2), "chosen": self.chosen,
                "limit": self.limit, "key": self.key,
                "throughput": {k: v if isinstance(v, bool) else round(v, 3)
                               for k, v in asdict(self.throughput).items()}}  # fmt: skip


def _prompt(generator: Any, tokens: int, salt: int) -> str:
    """A prompt of about ``tokens`` tokens (distinct per salt, so no cache or prefix reuse helps)."""
    words = " ".join(f"word{salt}x{i} history document text" for i in range(tokens))
    return generator.truncate(f"Profile {salt}: {words}", tokens) + "\nAnswer:"


@dataclass(frozen=True)
class ProbePrompts:
    """Prompts the probe times: per task, LaMP prompts as the evaluation builds them and P-PRF prompts."""

    answers: dict[str, list[str]]
    pbr: dict[str, list[str]]
    realistic: bool  # False: synthetic prompts of prompt.max_prompt_tokens (an upper bound; the data did not load)


def probe_prompts(generator: Any, settings: Settings) -> ProbePrompts:
    """PROBE_PROMPTS prompts per task built from the task's own dev samples (in the LLM evaluation's seeded order):
    the sample's input with its first retrieval.k profile documents, budgeted as the evaluation budgets them, and
    P-PRF's two prompts over its first pbr.lamp_k1 documents. Synthetic prompts of the maximal length when the data
    cannot be read (an upper bound, said in the plan)."""
    from prag_models.data.source import llm_eval_sample_ids, load_task_samples
    from prag_models.generation.answers import lamp_prompt
    from prag_models.generation.prompts import prompt_document
    from prag_models.methods.pbr import expansion_prompts

    one = settings.model_copy(update={"data": settings.data.model_copy(update={"llm_eval_samples": PROBE_PROMPTS}),
                                      "run": settings.run.model_copy(update={"generation_samples": -1})})
    pbr = settings.pbr
    answers: dict[str, list[str]] = {}
    expansions: dict[str, list[str]] = {}
    try:
        for task in settings.data.tasks:
            dev = load_task_samples(settings, task).get("dev", [])
            picked = set(llm_eval_sample_ids([s.sample_id for s in dev], one))
            samples = [s for s in dev if s.sample_id in picked]
            answers[task] = [
                lamp_prompt(task, s.input, [prompt_document(task, d.text, d.fields)
                                            for d in s.profile[: settings.retrieval.k]], generator, settings.prompt)
                for s in samples
            ]  # fmt: skip
            items = [(s.sample_id, s.query, [d.text for d in s.profile[: pbr.lamp_k1]]) for s in samples]
            utterances, reasoning = expansion_prompts(generator, items, pbr.lamp_num_pseudo, pbr.lamp_history_tokens)
            expansions[task] = utterances + reasoning
    except (OSError, ValueError) as error:  # the data cannot be read here: time the bound instead
        log.warning("LLM budget: timing synthetic prompts of prompt.max_prompt_tokens (%s)", error)
        length = settings.prompt.max_prompt_tokens
        synthetic = {t: [_prompt(generator, length, i)] for i, t in enumerate(settings.data.tasks)}
        return ProbePrompts(synthetic, synthetic, realistic=False)
    return ProbePrompts(answers, expansions, realistic=True)


def measure(generator: Any, settings: Settings, prompts: ProbePrompts | None = None) -> Throughput:
    """Seconds per label-scored, per generated and per P-PRF prompt, timed on the tasks' own prompts (probe_prompts)
    after a warm-up: each task answered the way the evaluation answers it (label scoring or generation with the
    task's token budget); no more prompts once MEASURE_SHARE of the budget is spent and each kind was timed."""
    started = time.perf_counter()
    cap = max(MEASURE_MIN_S, MEASURE_SHARE * settings.run.llm_budget_s)
    prompts = prompts or probe_prompts(generator, settings)
    generator.generate([_prompt(generator, 16, -1)], 1)  # warm-up: allocation, first kernels
    scored, generated, expansions, lengths = [], [], [], []

    can_score = bool(getattr(generator, "can_score_choices", False))

    def scores(task: str) -> bool:
        """Whether the task is answered by label scoring with this generator."""
        return can_score and answer_mode(task, settings.generator) == LABEL_SCORING

    kinds = {scores(task) for task in prompts.answers}

    def time_is_up() -> bool:
        """Past the cap with every kind of prompt the tasks need timed at least once."""
        every_kind = (True not in kinds or bool(scored)) and (False not in kinds or bool(generated))
        return every_kind and time.perf_counter() - started > cap

    for task, task_prompts in prompts.answers.items():
        if time_is_up():
            break
        for prompt in task_prompts:
            lengths.append(generator.count_tokens(prompt))
            t0 = time.perf_counter()
            if scores(task):
                generator.score_choices([prompt], list(LABELS[task]))
                scored.append(time.perf_counter() - t0)
            else:
                generator.generate([prompt], max_new_tokens_for(task, settings.generator))
                generated.append(time.perf_counter() - t0)
    # prompt throughput on a fresh prompt of the mean length (a prompt timed above would reuse its cached prefix)
    length = max(16, int(statistics.fmean(lengths))) if lengths else settings.prompt.max_prompt_tokens
    fresh = _prompt(generator, length, 1)
    t0 = time.perf_counter()
    generator.generate([fresh], 1)
    first_token_s = time.perf_counter() - t0
    tokens = generator.count_tokens(fresh)
    utility_s = 0.0
    first = next((p for task_prompts in prompts.answers.values() for p in task_prompts), "")
    if first and can_score:  # a utility prompt: the prompt with a gold-length answer scored (a fresh prefix)
        t0 = time.perf_counter()
        generator.score_answers([f"Sample 2. {first}"], ['{"title": "A short gold answer of about a dozen tokens"}'])
        utility_s = time.perf_counter() - t0
    if "pbr" in settings.retrieval.methods:
        for prompt in [p for task_prompts in prompts.pbr.values() for p in task_prompts][:PBR_PROBE_PROMPTS]:
            if expansions and time.perf_counter() - started > cap:
                break
            t0 = time.perf_counter()
            generator.generate([prompt], settings.pbr.lamp_max_new_tokens)
            expansions.append(time.perf_counter() - t0)
    mean = statistics.fmean
    generated_s = mean(generated) if generated else (mean(scored) if scored else 0.0)
    return Throughput(
        scored_s=mean(scored) if scored else generated_s,
        generated_s=generated_s,
        prompt_tokens_per_s=tokens / max(first_token_s, 1e-6),
        measured_in_s=time.perf_counter() - started,
        pbr_s=mean(expansions) if expansions else generated_s,
        realistic=prompts.realistic,
        utility_s=utility_s,
    )


def per_sample_seconds(settings: Settings, t: Throughput) -> float:
    """Seconds one LLM-evaluation sample costs over every configured task: a prompt per method (label-scored where
    the task answers by label scoring, else generated) and P-PRF's two generations where pbr is configured."""
    methods = settings.retrieval.methods
    total = 0.0
    for task in settings.data.tasks:
        mode = answer_mode(task, settings.generator)
        prompt_s = t.scored_s if mode == LABEL_SCORING else t.generated_s
        total += len(methods) * prompt_s + (2 * t.pbr_s if "pbr" in methods else 0.0)
    return total


def generation_budget_s(settings: Settings) -> float:
    """The part of run.llm_budget_s left to the generated outputs and P-PRF: the LLM utility, which decides or
    confirms the verdicts, takes utility.budget_share of it first (docs/methods.md §6.7)."""
    share = settings.utility.budget_share if settings.utility.enabled else 0.0
    return settings.run.llm_budget_s * (1.0 - share)


def plan(settings: Settings, t: Throughput) -> LlmPlan:
    """The sample count the generation budget pays for: data.llm_eval_samples whole or none (0: deferred to `prag
    evidence`); with data.llm_eval_samples = 0 (all), as many as fit."""
    per_sample, limit, budget = (
        per_sample_seconds(settings, t),
        settings.data.llm_eval_samples,
        generation_budget_s(settings),
    )
    fits = int(budget // per_sample) if per_sample > 0 else 10**9
    chosen = fits if limit <= 0 else limit if fits >= limit else 0
    return LlmPlan(budget, per_sample, chosen, limit, t, plan_key(settings))


def plan_key(settings: Settings) -> str:
    """What a plan depends on besides the machine: how it is measured, budget, limit, tasks, methods, generator and
    prompt settings."""
    parts = [PLAN_VERSION, settings.run.llm_budget_s, settings.utility.budget_share, settings.utility.enabled,
             settings.data.llm_eval_samples, list(settings.data.tasks),
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
    """(the plan of this run, whether nothing was measured): the stored plan for the same settings, else a new plan
    from the speeds stored for the same generator, prompts and tasks, else from measuring the generator (loaded by
    make_generator, closed after); a new plan is stored at path with the speeds."""
    found = stored_plan(path, settings)
    if found is not None:
        return found, True
    speeds = reused = stored_throughput(settings, path)
    if speeds is None:
        generator = make_generator()
        try:
            speeds = measure(generator, settings)
        finally:
            generator.close()
    new = plan(settings, speeds)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**new.metadata(), "machine_key": machine_key(settings)}, indent=1)
    return new, reused is not None
