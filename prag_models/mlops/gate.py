"""The promotion gate's metric decision (docs/methods.md §6): challenger against champion on the paired 95 % interval
of their per-sample difference over the same dev samples, never on two point estimates.

Evidence is any list of :class:`PairedEvidence` legs: per-sample values of one metric for the challenger bundle and
the champion bundle on the same samples (value i of both belongs to sample i). The CFRAG evaluation gives two legs
(``prag_models/stages/promotion_evidence.py``): the retrieval evaluation (every dev sample, the primary evidence) and
the LLM evaluation (as many samples as the LLM budget bought), each with the n below which it does not decide. A leg
with fewer samples than its minimum is reported and not used. The first deciding leg is the primary one:

* promote when its difference challenger − champion is shown on the better side of 0 and no other deciding leg's is
  shown on the worse side; "shown" is the verdict's own rule (``metrics.intervals.shown_above``): the 95 % interval
  wholly on that side and the paired t-test's one-sided p below 2.5 % (the percentile interval alone is narrower than
  the test at small n, issue 48);
* keep the champion otherwise (a tie, an interval that straddles 0, a regression, no deciding leg), unless overridden.

The verdict carries the figures it decided on (both means, the difference, its interval and n) for the MLflow
version's tags and description, the Dagster metadata and table ``model_promotions``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prag_models.metrics.intervals import Estimate, paired_difference, shown_above


@dataclass(frozen=True)
class PairedEvidence:
    """One leg of evidence: a metric's per-sample values for challenger and champion on the same samples."""

    name: str  # e.g. "retrieval" or "llm"
    metric: str  # e.g. "ndcg@5", "accuracy"
    higher_is_better: bool
    challenger: Sequence[float] | np.ndarray
    champion: Sequence[float] | np.ndarray
    min_n: int = 2  # fewer paired samples than this: the leg is reported, not used

    @property
    def n(self) -> int:
        """The number of paired samples."""
        return len(self.challenger)

    def difference(self) -> Estimate:
        """challenger − champion (mean over the samples) with its paired bootstrap interval."""
        return paired_difference(np.asarray(self.challenger, float), np.asarray(self.champion, float))


@dataclass(frozen=True)
class LegResult:
    """One leg's figures: both means, the difference challenger − champion, its 95 % interval and n."""

    name: str
    metric: str
    higher_is_better: bool
    challenger_value: float
    champion_value: float
    difference: Estimate
    deciding: bool  # n reached the leg's minimum
    min_n: int = 2
    shown_up: bool = False  # challenger − champion shown above 0 (interval and paired test, shown_above)
    shown_down: bool = False  # ... shown below 0

    @property
    def better(self) -> bool:
        """The difference is shown on the better side of 0 (the verdict's rule: interval and paired test)."""
        return self.shown_up if self.higher_is_better else self.shown_down

    @property
    def worse(self) -> bool:
        """The difference is shown on the worse side of 0."""
        return self.shown_down if self.higher_is_better else self.shown_up

    def text(self) -> str:
        """One line: ``retrieval ndcg@5: challenger 0.51 vs champion 0.49, difference +0.02, 95 % CI [+0.01, +0.03],
        n=96`` (a leg short of its minimum n says so)."""
        d = self.difference
        out = (f"{self.name} {self.metric}: challenger {self.challenger_value:.4g} vs champion "
               f"{self.champion_value:.4g}, difference {d.value:+.4g}, 95 % CI [{d.low:+.4g}, {d.high:+.4g}], "
               f"n={d.n}")  # fmt: skip
        return out if self.deciding else f"{out} (fewer than its minimum n={self.min_n}: not used)"


@dataclass(frozen=True)
class Verdict:
    """Outcome of the metric gate: whether to promote, why, and the figures of the leg it decided on."""

    promote: bool
    message: str
    legs: tuple[LegResult, ...] = field(default_factory=tuple)

    @property
    def primary(self) -> LegResult | None:
        """The leg the decision rests on (the first deciding one), None without one."""
        return next((leg for leg in self.legs if leg.deciding), None)

    def tags(self) -> dict[str, str]:
        """``promotion.evidence.*`` tags: the primary leg's figures and every leg's line."""
        out = {}
        leg = self.primary
        if leg is not None:
            d = leg.difference
            out |= {"promotion.evidence": f"{leg.name} {leg.metric}", "promotion.difference": f"{d.value:.6g}",
                    "promotion.ci_low": f"{d.low:.6g}", "promotion.ci_high": f"{d.high:.6g}",
                    "promotion.n_samples": str(d.n)}  # fmt: skip
        for item in self.legs:
            out[f"promotion.evidence.{item.name}"] = item.text()
        return out


def leg_result(evidence: PairedEvidence) -> LegResult:
    """The figures of one leg (means, paired difference and interval, whether n reached its minimum)."""
    chal, champ = np.asarray(evidence.challenger, float), np.asarray(evidence.champion, float)
    if len(chal) != len(champ):
        raise ValueError(f"{evidence.name}: paired values need equal lengths, got {len(chal)} and {len(champ)}")
    mean = (lambda x: float(np.mean(x))) if len(chal) else (lambda x: math.nan)
    minimum = max(evidence.min_n, 2)
    up = shown_above(chal, champ)[1] if len(chal) else False
    down = shown_above(champ, chal)[1] if len(chal) else False
    return LegResult(evidence.name, evidence.metric, evidence.higher_is_better, mean(chal), mean(champ),
                     evidence.difference(), len(chal) >= minimum, minimum, up, down)  # fmt: skip


def decide_promotion(task: str, evidence: Sequence[PairedEvidence], override: bool = False) -> Verdict:
    """The metric gate on paired intervals (module docstring): promote only a challenger whose interval of
    challenger − champion lies on the better side of 0 on the primary leg, with no deciding leg showing it worse."""
    legs = tuple(leg_result(e) for e in evidence)
    lines = "; ".join(leg.text() for leg in legs)
    deciding = [leg for leg in legs if leg.deciding]
    if not deciding:
        why = (f"no paired evidence with its minimum n ({lines})" if legs else
               "no paired evidence of challenger and champion on the same samples (materialize "
               "cfrag_model_evaluation with both bundles registered)")  # fmt: skip
        if override:
            return Verdict(True, f"{task}: promoted by override although there is {why}", legs)
        return Verdict(False, f"{task}: champion kept: {why}; override to promote anyway", legs)
    primary, worse = deciding[0], [leg for leg in deciding if leg.worse]
    side = "above" if primary.higher_is_better else "below"
    if primary.better and not worse:
        return Verdict(True, f"{task}: promoted: the 95 % interval of challenger − champion lies {side} 0 "
                             f"(paired over the same samples): {lines}", legs)  # fmt: skip
    if worse:
        why = f"the challenger is worse on {', '.join(f'{w.name} {w.metric}' for w in worse)}"
    elif primary.difference.low == primary.difference.high == 0:
        why = "the challenger ties the champion on every sample"
    else:
        why = f"the 95 % interval of challenger − champion does not lie {side} 0"
    if override:
        return Verdict(True, f"{task}: promoted by override although {why}: {lines}", legs)
    return Verdict(False, f"{task}: champion kept: {why}: {lines}; override to promote anyway", legs)
