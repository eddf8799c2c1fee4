"""The orderings the method papers (the seeds) claim, checked against what prag measures, with paired intervals.

A claim "A > B" holds on a task when the paired 95 % bootstrap interval of (A − B) lies above 0 (for a metric where
lower is better, B − A), is reversed when it lies below 0, and is not shown otherwise. A claim "A ≥ B" holds when A is
shown better, is reversed when A is shown worse, and is otherwise only **not reversed** — counted apart from "holds",
since an interval that includes 0 is no evidence that A is as good as B. Each row also says whether the two methods'
own 95 % intervals are disjoint (a stricter test than the paired one).

Claims that are the same comparison — identical per-sample differences, e.g. cfrag > dense and cfrag > user-only
where dense and user-only retrieve the same — are one row listing every claim it answers, so a tally counts each
comparison once. A comparison whose two methods score the same on every sample is marked identical (the trained CFRAG
that kept its untrained initialisation *is* the untrained one: there is nothing to test).

Multiplicity: the distinct comparisons of one evaluation (retrieval or LLM) over all tasks form one family; each gets
the two-sided p-value of the paired t-test and a Holm-adjusted verdict (``metrics.intervals.holm``): the raw verdict
where Holm rejects at family-wise 5 %, else "not shown" ("not reversed" for "≥" claims).

A paper's claim compares its methods at the same settings: where prag tunes one side's knobs per task and not the
other's (ClusterRAG's collaborative vs hybrid or user-only, CFRAG vs dense), that side is read from its untuned
``<method>@default`` row (the CFRAG ablations share full CFRAG's tuned knobs, so they compare as they are). prag's own
claims compare the methods as prag runs them, tuned.

"The best personalized method" is chosen by cross-fitting (docs/methods.md §6): the samples are split into two folds
by a hash of their id; on each fold the method is the one with the best mean on the *other* fold. Choosing and testing
on the same samples would favour whichever method was luckiest on them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from prag_models.methods.cfrag.variants import CFRAG_METHODS
from prag_models.methods.knobs import KNOB_SPACE
from prag_models.metrics.intervals import Estimate, estimate, holm, paired_difference, paired_p_value

HOLDS, NOT_SHOWN, NOT_REVERSED, REVERSED = "holds", "not shown", "not reversed", "reversed"
NO_DATA = "no data"
PERSONALIZED = (
    "clusterrag_collaborative", "clusterrag_hybrid", "clusterrag_two_stage", "clusterrag_community", "cfrag", "pbr",
    "item_cf",
)  # fmt: skip
FAMILY_ALPHA = 0.05  # the family-wise error rate Holm controls
CLAIM_COLUMNS = [
    "source", "claim", "claims", "n_claims", "metric", "difference", "ci_low", "ci_high", "n_samples", "p_value",
    "verdict", "identical", "intervals_disjoint", "strict",
]  # fmt: skip


@dataclass(frozen=True)
class Claim:
    """One ordering: ``better`` relation ``worse`` (">" strict, ">=" not worse), and who claims it."""

    source: str
    better: str
    relation: str
    worse: str

    @property
    def label(self) -> str:
        """``source: better relation worse``."""
        return f"{self.source}: {self.better} {self.relation} {self.worse}"


#: The ablations of docs/methods.md §2.8, as the CFRAG variants define them (every variant but full CFRAG).
CFRAG_ABLATIONS: tuple[str, ...] = CFRAG_METHODS[1:]
CLAIMS: tuple[Claim, ...] = (
    Claim("CFRAG", "cfrag", ">", "dense"),
    Claim("CFRAG", "dense", ">", "random"),
    Claim("CFRAG", "random", ">", "zero_shot"),
    *(Claim("CFRAG", "cfrag", ">", a) for a in CFRAG_ABLATIONS),
    Claim("ClusterRAG", "clusterrag_hybrid", ">=", "clusterrag_collaborative"),
    Claim("ClusterRAG", "clusterrag_collaborative", ">=", "clusterrag_user_only"),
    Claim("PBR", "pbr", ">", "dense"),
    Claim("PBR", "pbr", ">", "pbr_anchor_only"),
    Claim("prag", "clusterrag_collaborative", ">", "clusterrag_user_only"),
    Claim("prag", "clusterrag_community", ">", "clusterrag_user_only"),
    Claim("prag", "cfrag", ">", "clusterrag_user_only"),
    Claim("prag", "cfrag", ">=", "cfrag_no_reranker_tuning"),
    Claim("prag", "clusterrag_collaborative", ">", "random"),
    Claim("prag", "cfrag", ">", "random"),
    Claim("prag", "best personalized", ">", "dense_global"),
)


#: The methods run with the same tuned knobs: full CFRAG and its ablations, and each tuned ClusterRAG method alone.
TUNED_TOGETHER: tuple[frozenset[str], ...] = (frozenset(CFRAG_METHODS), *(frozenset({m}) for m in KNOB_SPACE))


def at_same_settings(claim: Claim, available: set[str] | pd.Index) -> tuple[str, str]:
    """The two methods a claim compares: for a paper's claim, a side tuned apart from the other is its untuned
    ``@default`` row (where the evaluation has one); prag's own claims compare the tuned methods."""
    sides = [claim.better, claim.worse]
    if claim.source == "prag":
        return claim.better, claim.worse
    for i, (me, other) in enumerate(((claim.better, claim.worse), (claim.worse, claim.better))):
        together = any(me in group and other in group for group in TUNED_TOGETHER)
        if f"{me}@default" in available and not together:
            sides[i] = f"{me}@default"
    return sides[0], sides[1]


def verdict(relations: tuple[str, ...] | str, diff: Estimate) -> str:
    """holds / not shown / not reversed / reversed of a paired difference oriented so that positive favours the
    better side; "not reversed" only when every claim the comparison answers is a "≥" claim."""
    if diff.n == 0:
        return NO_DATA
    if diff.high < 0:
        return REVERSED
    if diff.low > 0:
        return HOLDS
    return NOT_REVERSED if all(r == ">=" for r in ((relations,) if isinstance(relations, str) else relations)) \
        else NOT_SHOWN


def fold_of(sample_id: object) -> int:
    """The cross-fitting fold (0 or 1) of a sample: a stable hash of its id, independent of order and of the run."""
    return hashlib.sha1(str(sample_id).encode("utf-8")).digest()[0] & 1


def best_mean(scores: pd.DataFrame, higher_is_better: bool) -> str | None:
    """The personalized method (oracle excluded) with the best mean among those run on the most samples."""
    mine = scores[scores["method"].isin(PERSONALIZED)]
    counts = mine.groupby("method")["sample_id"].nunique()
    full = counts[counts == counts.max()].index if len(counts) else []
    means = mine[mine["method"].isin(full)].groupby("method")["value"].mean()
    if means.empty:
        return None
    return str(means.idxmax() if higher_is_better else means.idxmin())


@dataclass(frozen=True)
class CrossFit:
    """The cross-fitted choice: per sample the value of the method chosen on the other fold, and each fold's choice."""

    values: pd.Series
    chosen: tuple[str | None, str | None]  # the method used on fold 0 and on fold 1 (chosen on the other fold)

    @property
    def single(self) -> str | None:
        """The method both folds chose, or None when they disagree (then no one method's gain is measured)."""
        return self.chosen[0] if self.chosen[0] == self.chosen[1] else None

    def describe(self) -> str:
        """``cfrag (both folds)`` or ``fold 0: cfrag, fold 1: pbr``."""
        if self.single is not None:
            return f"{self.single} (both folds)"
        return ", ".join(f"fold {f}: {m or '—'}" for f, m in enumerate(self.chosen))


def cross_fit(scores: pd.DataFrame, higher_is_better: bool) -> CrossFit | None:
    """Cross-fitted "best personalized method": on each fold, the method with the best mean on the other fold; None
    without personalized rows."""
    folds = scores["sample_id"].map(fold_of)
    chosen = tuple(best_mean(scores[folds != f], higher_is_better) for f in (0, 1))
    if chosen[0] is None and chosen[1] is None:
        return None
    parts = []
    for f, method in enumerate(chosen):
        if method is not None:
            part = scores[(folds == f) & (scores["method"] == method)]
            parts.append(part.drop_duplicates("sample_id").set_index("sample_id")["value"])
    values = pd.concat(parts) if parts else pd.Series(dtype=float)
    return CrossFit(values, (chosen[0], chosen[1]))


def best_personalized(scores: pd.DataFrame, higher_is_better: bool) -> tuple[pd.Series, str] | None:
    """``cross_fit`` as (value per sample_id, the methods chosen joined by "/"), or None without personalized rows."""
    crossed = cross_fit(scores, higher_is_better)
    if crossed is None:
        return None
    return crossed.values, "/".join(sorted({m for m in crossed.chosen if m is not None}))


def _disjoint(a: np.ndarray, b: np.ndarray, higher_is_better: bool) -> bool:
    """True when the better method's own 95 % interval lies wholly on its better side of the other's."""
    ea, eb = estimate(a), estimate(b)
    return ea.low > eb.high if higher_is_better else ea.high < eb.low


def _key(diffs: pd.Series) -> tuple:
    """What makes two comparisons the same: their samples and per-sample differences (rounded against float noise)."""
    return tuple(zip(diffs.index.astype(str), np.round(diffs.to_numpy(), 12).tolist(), strict=True))


def check_claims(
    scores: pd.DataFrame, metric: str, higher_is_better: bool = True, claims: tuple[Claim, ...] = CLAIMS
) -> pd.DataFrame:
    """One row per distinct comparison among the claims, on per-sample values (method, sample_id, value) of one task
    and metric: every claim it answers, difference, paired interval, n, p-value, verdict, whether the two methods are
    identical on every sample and whether their own intervals are disjoint. Claims whose methods are missing are left
    out."""
    wide = scores.pivot_table(index="sample_id", columns="method", values="value", aggfunc="first")
    groups: dict[tuple, dict] = {}
    for claim in claims:
        label = claim.label
        if claim.better == "best personalized":
            crossed = cross_fit(scores, higher_is_better)
            if crossed is None:
                continue
            wide = wide.assign(**{"best personalized": crossed.values.reindex(wide.index)})
            label = f"{claim.source}: best personalized ({crossed.describe()}; cross-fitted) {claim.relation} " \
                    f"{claim.worse}"
        better, worse = (claim.better, claim.worse) if claim.better == "best personalized" else at_same_settings(
            claim, wide.columns)
        if better not in wide or worse not in wide:
            continue
        if (better, worse) != (claim.better, claim.worse):
            label = f"{claim.source}: {better} {claim.relation} {worse}"
        a, b = wide[better], wide[worse]
        both = pd.DataFrame({"a": a, "b": b})[a.notna() & b.notna()]
        diffs = both["a"] - both["b"]
        diffs = diffs if higher_is_better else -diffs
        group = groups.setdefault(_key(diffs), {"claims": [], "both": both, "diffs": diffs})
        group["claims"].append((claim, label))
    rows = []
    for group in groups.values():
        both, diffs, answered = group["both"], group["diffs"], group["claims"]
        a, b = both["a"].to_numpy(), both["b"].to_numpy()
        diff = paired_difference(a, b) if higher_is_better else paired_difference(b, a)
        relations = tuple(c.relation for c, _ in answered)
        rows.append((
            " · ".join(dict.fromkeys(c.source for c, _ in answered)),
            " · ".join(lab.split(": ", 1)[1] for _, lab in answered), " · ".join(lab for _, lab in answered),
            len(answered), metric, diff.value, diff.low, diff.high, diff.n, paired_p_value(diffs.to_numpy()),
            verdict(relations, diff), bool(len(diffs) and not diffs.to_numpy().any()),
            bool(len(a) > 1 and _disjoint(a, b, higher_is_better)), any(r == ">" for r in relations),
        ))  # fmt: skip
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def with_holm(table: pd.DataFrame, family: str = "evaluation", alpha: float = FAMILY_ALPHA) -> pd.DataFrame:
    """Adds p_holm, holm_verdict and family_size: Holm over each family (the rows sharing ``family``); the Holm
    verdict is the raw one where Holm rejects, else not shown / not reversed."""
    if table.empty:
        return table.assign(p_holm=[], holm_verdict=[], family_size=[])
    out = table.copy()
    out["p_holm"], out["holm_verdict"], out["family_size"] = 1.0, out["verdict"], 0
    for _, part in out.groupby(family, sort=False):
        # the hypotheses tested: a comparison without data, or of two methods identical on every sample, tests nothing
        tested = part[(part["verdict"] != NO_DATA) & ~part["identical"].astype(bool)]
        rejected, adjusted = holm(tested["p_value"].to_numpy(), alpha)
        out.loc[tested.index, "p_holm"] = adjusted
        out.loc[part.index, "family_size"] = len(tested)
        weak = tested.index[~rejected & tested["verdict"].isin([HOLDS, REVERSED]).to_numpy()]
        out.loc[weak, "holm_verdict"] = np.where(tested.loc[weak, "strict"], NOT_SHOWN, NOT_REVERSED)
    return out


def llm_scores(con, task: str) -> tuple[pd.DataFrame, str, bool]:
    """Per-sample primary-metric values of the LLM evaluation (table generations) of one task."""
    from prag_models.metrics.lamp import HIGHER_IS_BETTER, per_sample_scores, primary_metric

    gens = con.execute("SELECT method, sample_id, prediction, gold FROM generations WHERE task = ?", [task]).df()
    metric = primary_metric(task)
    if gens.empty:
        return pd.DataFrame(columns=["method", "sample_id", "value"]), metric, HIGHER_IS_BETTER[metric]
    values = per_sample_scores(task, gens["prediction"].astype(str).tolist(), gens["gold"].astype(str).tolist())
    return gens[["method", "sample_id"]].assign(value=values[metric]), metric, HIGHER_IS_BETTER[metric]


def retrieval_scores(con) -> list[tuple[str, str, pd.DataFrame]]:
    """(task, primary metric, per-sample values: method, sample_id, value) of the retrieval evaluation, per task."""
    from prag_models.storage.store import table_exists

    if not table_exists(con, "lamp_retrieval_sample_scores"):
        return []
    primary = con.execute("SELECT DISTINCT task, metric FROM lamp_retrieval_evaluation WHERE is_primary").fetchall()
    return [
        (task, metric, con.execute(
            "SELECT method, sample_id, value FROM lamp_retrieval_sample_scores WHERE task = ? AND metric = ?",
            [task, metric]).df())
        for task, metric in sorted(primary)
    ]  # fmt: skip


def claims_from_store(con, tasks: list[str] | None = None) -> pd.DataFrame:
    """Every distinct comparison per task on the retrieval evaluation (its primary metric) and on the LLM evaluation,
    with Holm over each evaluation's family (the given tasks; all when None)."""
    from prag_models.storage.store import table_exists

    keep = (lambda task: True) if tasks is None else (lambda task: task in tasks)
    frames = [check_claims(scores, metric).assign(task=task, evaluation="retrieval")
              for task, metric, scores in retrieval_scores(con) if keep(task)]  # fmt: skip
    if table_exists(con, "generations"):
        for (task,) in sorted(con.execute("SELECT DISTINCT task FROM generations").fetchall()):
            if keep(task):
                scores, metric, higher = llm_scores(con, task)
                frames.append(check_claims(scores, metric, higher).assign(task=task, evaluation="llm"))
    frames = [f for f in frames if len(f)]
    return with_holm(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()


MARKS = {HOLDS: "✓", NOT_REVERSED: "≥", NOT_SHOWN: "·", REVERSED: "✗", NO_DATA: "–"}
EVALUATIONS = {"retrieval": "Retrieval evaluation (no LLM)", "llm": "LLM evaluation"}


def _row_order(label: str) -> int:
    """Where a comparison goes: at its first claim's place in CLAIMS."""
    order = {c.label: i for i, c in enumerate(CLAIMS)}
    first = label.split(" · ")[0]
    return order.get(first, len(order))


def _counts(verdicts: pd.Series) -> str:
    """``3 holds, 1 not reversed, 7 not shown, 0 reversed``."""
    c = verdicts.value_counts()
    return ", ".join(f"{int(c.get(v, 0))} {v}" for v in (HOLDS, NOT_REVERSED, NOT_SHOWN, REVERSED))


def tally(table: pd.DataFrame) -> str:
    """Per evaluation: the family size and the counts of distinct comparisons, Holm-adjusted (the headline) and raw."""
    lines = []
    for evaluation, part in table.groupby("evaluation", sort=False):
        identical = part["identical"].astype(bool)
        no_data = part["verdict"] == NO_DATA
        tested = part[~identical & ~no_data]
        disjoint = int(part.loc[part["holm_verdict"] == HOLDS, "intervals_disjoint"].sum())
        lines.append(
            f"- {EVALUATIONS.get(evaluation, evaluation)}: {len(part)} distinct comparisons answer "
            f"{int(part['n_claims'].sum())} claim cells; Holm family = the {len(tested)} tested ones "
            f"(family-wise 5 %; {int(identical.sum())} identical on every sample and {int(no_data.sum())} without "
            f"data test nothing). **Headline (Holm column): {_counts(tested['holm_verdict'])}** ({disjoint} of the "
            f"holds with disjoint own intervals); raw, each at 95 %: {_counts(tested['verdict'])}."
        )
    return "\n".join(lines)


def claims_markdown(table: pd.DataFrame) -> str:
    """Per evaluation, one markdown table: distinct comparison (every claim it answers) × task, cells ``raw/Holm
    Δ ± half-width (n)`` (``‖`` when the two methods' own intervals are disjoint, ``=`` when identical on every
    sample), then the tally with the family sizes."""
    if table.empty:
        return "_no evaluation tables: materialize the graph first_"
    parts = []
    for evaluation, part in table.groupby("evaluation", sort=False):
        t = part.assign(
            cell=[
                f"= identical (n={n})" if same else "– no data (n=0)" if v == NO_DATA else
                f"{MARKS[v]}{MARKS[h]} {d:+.3f} ± {(hi - lo) / 2:.3f} (n={n}){' ‖' if dis else ''}"
                for v, h, d, lo, hi, n, dis, same in part[
                    ["verdict", "holm_verdict", "difference", "ci_low", "ci_high", "n_samples", "intervals_disjoint",
                     "identical"]
                ].values
            ],
            row=part["claims"].str.replace(r" \(.*\)", "", regex=True),
        )
        wide = t.pivot_table(index="row", columns="task", values="cell", aggfunc="first").fillna("")
        wide = wide.loc[sorted(wide.index, key=_row_order)]
        wide.index.name = "comparison (every claim it answers)"
        parts.append(f"### {EVALUATIONS.get(evaluation, evaluation)}\n\n" + wide.to_markdown())
    legend = (
        "First mark: the raw verdict (paired 95 % bootstrap interval); second: Holm-adjusted over the evaluation's "
        "family (paired t-test p-values, family-wise 5 %). ✓ holds, ≥ not reversed (a \"≥\" claim whose interval "
        "includes 0), · not shown, ✗ reversed; a comparison answering both a \">\" and a \"≥\" claim shows the "
        "strict one's verdict. ‖: the two methods' own 95 % intervals are disjoint. = identical: the two methods "
        "score the same on every sample (e.g. a trained model that kept its untrained initialisation is the same "
        "model: nothing to test). Claims with identical per-sample differences are one comparison, counted once."
    )
    return "\n\n".join(parts) + "\n\n" + legend + "\n\nTallies of distinct comparisons:\n\n" + tally(table)
