"""Measure before spending (issue 28): the CFRAG feedback stage labels a seeded probe of its samples first and
compares the teacher's ranking of their candidates with cosine's, by truth NDCG@k with a paired 95 % interval (the
same figure the training records as the teacher's headroom, prag_models.methods.cfrag.fit.teacher_headroom). Where
the interval is not above 0, distilling the teacher cannot beat the initialisation: labelling stops after the probe
and the retriever and rerankers register their initialisation (``feedback_probe`` rows say why).

The probe has two stages, so that its decision rests on the samples its interval needs (docs/methods.md §2.5): a
pilot of ``cfrag.feedback_probe_samples`` gives the spread and effect from which the second stage's size is planned
for 80 % power (at least ``cfrag.feedback_probe_min_samples``, at most the budget's other informative samples); the
headroom is then decided on the second stage's fresh samples alone (the plan is fixed before they are labelled: no
peeking), or on the pilot where the budget holds no other informative sample.

The probe spends seconds only where they buy its decision (issue 47): with a time budget (run.feedback_budget_s,
an equal share per task) and this machine's measured seconds per prompt, a probe whose pilot and smallest second
stage the share cannot pay is not run, and one whose planned second stage the share cannot pay stops after its
pilot; both record "not measured on this machine: needs N samples, the budget buys M", and the retriever and
rerankers register their initialisation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from prag_models.config.settings import Settings
from prag_models.data.truth import load_truth
from prag_models.methods.cfrag.candidates import select_feedback_samples
from prag_models.methods.cfrag.training_set import training_set
from prag_models.storage.store import read_rows, replace_rows, table_exists

PROBE_TABLE = "feedback_probe"
#: decision values: the probe showed no headroom and labelling stopped; it showed headroom (or could not be
#: measured: no truth) and the whole budget was labelled; the whole budget was forced; no probe was configured
STOPPED, CONTINUED, FORCED, NO_PROBE = "stopped", "continued", "forced", "no_probe"
#: the budget could not pay the samples the probe's interval needs: nothing decided, CFRAG keeps its initialisation
NOT_MEASURED = "not_measured"
#: decisions after which the retriever and rerankers register their initialisation instead of training
UNTRAINED = (STOPPED, NOT_MEASURED)


@dataclass
class ProbeResult:
    """What the probe measured and decided for one task."""

    task: str
    generator_id: str
    prompt_version: str
    decision: str
    reason: str
    probe_samples: int  # labelled by the probe: pilot + second stage
    budget_samples: int
    pilot_samples: int = 0
    decided_on: int = 0  # the samples the headroom was decided on (the second stage's; the pilot's without one)
    headroom: float | None = None
    headroom_low: float | None = None
    headroom_high: float | None = None
    headroom_n: int = 0
    teacher_truth_ndcg: float | None = None
    cosine_truth_ndcg: float | None = None

    def metadata(self) -> dict:
        """The probe as a JSON-able dict (asset metadata, the table row)."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def candidate_gains(con, task: str, inputs) -> dict[str, np.ndarray]:  # noqa: ANN001 - FeedbackInputs
    """The 0/1 truth of each selected sample's candidates (NaN unknown), known without an LLM."""
    truth = load_truth(con, task, "train")
    out = {}
    for sample_id, cands in inputs.candidates.items():
        gains = [truth.gain(sample_id, c.doc_id) for c in cands]
        out[sample_id] = np.array([np.nan if g is None else g for g in gains], dtype=np.float32)
    return out


def informative_ids(sample_ids: Sequence[str], gains: dict[str, np.ndarray]) -> list[str]:
    """The samples whose candidates differ in truth: only those can show a ranking better than cosine's."""
    return [s for s in sample_ids if len(gains.get(s, [])) and np.ptp(np.nan_to_num(gains[s], nan=0.0)) > 0]


def probe_sample_ids(sample_ids: Sequence[str], gains: dict[str, np.ndarray], settings: Settings) -> list[str] | None:
    """The probe's pilot: a seeded choice of cfrag.feedback_probe_samples among the informative samples; None when
    there is no probe (0, or it would hold every selected sample)."""
    n = settings.cfrag.feedback_probe_samples
    informative = informative_ids(sample_ids, gains)
    if n <= 0 or min(n, len(informative)) >= len(sample_ids):
        return None
    return select_feedback_samples(informative, n, settings.cfrag.seed + 1)


def second_stage_ids(
    sample_ids: Sequence[str], gains: dict[str, np.ndarray], pilot: Sequence[str], pilot_differences: np.ndarray,
    settings: Settings, affordable: int | None = None,
) -> tuple[list[str], int]:  # fmt: skip
    """(the probe's second stage, the samples its power needs): fresh informative samples, as many as 80 % power at
    the pilot's headroom needs (at least cfrag.feedback_probe_min_samples, at most those the sample budget holds);
    planned before any is labelled. Empty when the time budget affords fewer than it needs (``affordable``)."""
    from prag_models.metrics.intervals import planned_samples

    rest = [s for s in informative_ids(sample_ids, gains) if s not in set(pilot)]
    n = planned_samples(pilot_differences, settings.cfrag.feedback_probe_min_samples, len(rest), 0.8)
    if affordable is not None and n > affordable:
        return [], n
    return (select_feedback_samples(rest, n, settings.cfrag.seed + 2) if n > 0 else []), n


def probe_seconds(settings: Settings) -> tuple[float, float] | None:
    """(the task's seconds of run.feedback_budget_s, seconds per feedback prompt on this machine), or None when the
    probe is not limited (no budget set, or the machine's speed was not measured)."""
    from prag_models.llm.speeds import stored_throughput

    if settings.run.feedback_budget_s < 0:
        return None
    speeds = stored_throughput(settings)
    if speeds is None:
        return None
    return settings.run.feedback_budget_s / max(1, len(settings.data.tasks)), speeds.per_utility_prompt()


def not_measured(base: dict, needed: int, buys: int, seconds: float) -> ProbeResult:
    """The decision of a probe the budget cannot pay: nothing measured, CFRAG keeps its initialisation."""
    reason = (f"not measured on this machine: the probe needs {needed} samples (≈ {seconds:.0f} s), the budget buys "
              f"{buys} (run.feedback_budget_s); the retriever and rerankers keep their initialisation")  # fmt: skip
    return ProbeResult(**base, decision=NOT_MEASURED, reason=reason)


def headroom_differences(inputs, labels: pd.DataFrame, gains: dict[str, np.ndarray], probe: Sequence[str],  # noqa: ANN001
                         settings: Settings) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(teacher's, cosine's) truth NDCG@k of each probe sample with labelled candidates of different truth."""
    from prag_models.methods.cfrag.fit import relevance_ndcg_samples

    samples = inputs.samples[inputs.samples["sample_id"].isin(set(probe))]
    ts = training_set(inputs.index, samples, inputs.candidates, labels, {u: np.zeros(1) for u in samples["user_id"]})
    if not ts.sample_ids:
        return np.zeros(0), np.zeros(0)
    cosine = np.einsum("ncd,nd->nc", ts.docs, ts.queries)
    truth = np.full(ts.mask.shape, np.nan, dtype=np.float32)
    for i, (sample_id, rows) in enumerate(zip(ts.sample_ids, ts.rows, strict=True)):
        of_row = {c.row: g for c, g in zip(inputs.candidates[sample_id], gains[sample_id], strict=True)}
        truth[i, : len(rows)] = [of_row[r] for r in rows]
    k = max(1, settings.cfrag.final_k or 3)
    teacher, init = (relevance_ndcg_samples(x, truth, ts.mask, k) for x in (ts.teacher, cosine))
    keep = np.isfinite(teacher) & np.isfinite(init)
    return teacher[keep], init[keep]


def measure_headroom(inputs, labels: pd.DataFrame, gains: dict[str, np.ndarray], probe: Sequence[str],  # noqa: ANN001
                     settings: Settings):  # noqa: ANN201 - (value, low, high, n, teacher mean, cosine mean) or None
    """Truth NDCG@k of the teacher's ranking of the probe's candidates minus cosine's, paired interval (value, low,
    high, n, teacher mean, cosine mean); None where no probe sample has labelled candidates of different truth."""
    from prag_models.metrics.intervals import paired_difference

    teacher, init = headroom_differences(inputs, labels, gains, probe, settings)
    if not len(teacher):
        return None
    est = paired_difference(teacher, init)
    return est.value, est.low, est.high, est.n, float(teacher.mean()), float(init.mean())


def decide(base: dict, headroom, force: bool) -> ProbeResult:  # noqa: ANN001 - teacher_headroom's tuple or None
    """The probe's decision from its measured headroom: labelling continues only where the interval is above 0."""
    if headroom is None:
        reason = "headroom not measurable (no probe candidates of different truth): whole budget"
        return ProbeResult(**base, decision=FORCED if force else CONTINUED, reason=reason)
    value, low, high, n, teacher, cosine = headroom
    figures = dict(headroom=value, headroom_low=low, headroom_high=high, headroom_n=n, teacher_truth_ndcg=teacher,
                   cosine_truth_ndcg=cosine)  # fmt: skip
    what = f"teacher's truth NDCG minus cosine's {value:+.4f} [{low:+.4f}, {high:+.4f}] (n={n})"
    if force:
        return ProbeResult(**base, **figures, decision=FORCED, reason=f"cfrag.feedback_force: whole budget; {what}")
    if n > 1 and low > 0:
        return ProbeResult(**base, **figures, decision=CONTINUED, reason=f"teacher headroom shown: {what}")
    reason = f"no teacher headroom: {what} is not above 0; labelling stopped after the probe"
    return ProbeResult(**base, **figures, decision=STOPPED, reason=reason)


def write_probe(con, result: ProbeResult) -> None:
    """Replace the task's ``feedback_probe`` row."""
    floats = ["headroom", "headroom_low", "headroom_high", "teacher_truth_ndcg", "cosine_truth_ndcg"]
    row = pd.DataFrame([result.metadata()]).astype({c: "float64" for c in floats})  # None -> NaN, typed columns
    replace_rows(con, PROBE_TABLE, row, {"task": result.task})


def probe_stop_reason(con, task: str, generator_id: str | None = None, prompt_version: str | None = None) -> str:
    """Why the task's retriever and rerankers are not trained: the probe's reason when it stopped labelling or could
    not be paid (for this generator and prompt version, when given), else ""."""
    if not table_exists(con, PROBE_TABLE):
        return ""
    rows = read_rows(con, PROBE_TABLE, {"task": task})
    if generator_id is not None:
        rows = rows[(rows["generator_id"] == generator_id) & (rows["prompt_version"] == prompt_version)]
    stopped = rows[rows["decision"].isin(UNTRAINED)]
    return str(stopped["reason"].iloc[0]) if len(stopped) else ""
