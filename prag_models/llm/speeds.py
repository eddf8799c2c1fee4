"""This machine's measured LLM speeds (issues 28, 47): what `prag materialize` timed, stored under the home with the
CPU it was timed on, so that the stages that spend LLM time (the utility, the feedback probe, P-PRF) size their work by
it. Measuring is prag_models/evaluation/llm_budget.py's; here is only what is measured and where it is kept."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from prag_models.config.settings import Settings

#: Bump when what is measured changes (a stored measurement from an older prag is measured again).
SPEEDS_VERSION = "v3"


@dataclass(frozen=True)
class Throughput:
    """Measured seconds per label-scored, generated (task budget) and P-PRF prompt, and prompt tokens/s."""

    scored_s: float
    generated_s: float
    prompt_tokens_per_s: float
    measured_in_s: float
    pbr_s: float = 0.0  # one P-PRF generation (pbr.lamp_max_new_tokens)
    realistic: bool = True  # timed on the tasks' own prompts (False: synthetic prompts of the maximal length)
    utility_s: float = 0.0  # one utility prompt: a task prompt and a gold-length answer scored (0: not timed)

    def per_utility_prompt(self) -> float:
        """Seconds one utility (or feedback) prompt costs: timed where the generator scores answers, else a scored
        prompt's."""
        return self.utility_s or self.scored_s or self.generated_s


def cpu_description() -> str:
    """The CPU as its speed depends on it: model, vector width the kernels may use (AVX-512 switched off by
    ATEN_CPU_CAPABILITY=avx2 counts as AVX2), and the cores this process may run on."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    wide = "avx512f" in flags and os.environ.get("ATEN_CPU_CAPABILITY", "").lower() not in ("avx2", "default")
    kind = ("AVX-512" + (" (BF16)" if "avx512_bf16" in flags else "")) if wide else ("AVX2" if "avx2" in flags
                                                                                    else "no AVX2")  # fmt: skip
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return f"{model}, {kind}, {cores} core{'s' if cores > 1 else ''}"


def machine_key(settings: Settings) -> str:
    """What the measured speeds depend on: how they are measured, the CPU, the generator, the prompts and the tasks
    (not the budget: a stage reads the speeds under any budget)."""
    parts = [SPEEDS_VERSION, cpu_description(), settings.generator.model_dump(mode="json"),
             settings.prompt.model_dump(mode="json"), list(settings.data.tasks)]  # fmt: skip
    return json.dumps(parts, sort_keys=True)


def budget_path(settings: Settings) -> Path:
    """Where `prag materialize` stores the LLM budget's plan and the measured speeds (under the home)."""
    return settings.home_path / "reports" / "llm_budget.json"


def stored_throughput(settings: Settings, path: Path | None = None) -> Throughput | None:
    """This machine's LLM speeds as `prag materialize` measured them for the same generator, prompts and tasks, else
    None (a stage then times its own prompts)."""
    try:
        data = json.loads((path or budget_path(settings)).read_text(encoding="utf-8"))
        return Throughput(**data["throughput"]) if data.get("machine_key") == machine_key(settings) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


