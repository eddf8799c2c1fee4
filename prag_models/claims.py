"""The orderings the method papers (the seeds) claim, checked against what prag measures, with paired intervals.

A claim "A > B" holds on a task when the paired 95 % bootstrap interval of (A − B) lies above 0 (for a metric where
lower is better, B − A), is reversed when it lies below 0, and is not shown otherwise. A claim "A ≥ B" holds unless
it is reversed. Nothing here is tuned: a claim that does not hold is reported as not holding.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from prag_models.intervals import Estimate, paired_difference

HOLDS, NOT_SHOWN, REVERSED = "holds", "not shown", "reversed"
PERSONALIZED = (
    "clusterrag_collaborative", "clusterrag_hybrid", "clusterrag_two_stage", "clusterrag_community", "cfrag", "pbr",
)  # fmt: skip


@dataclass(frozen=True)
class Claim:
    """One ordering: ``better`` relation ``worse`` (">" strict, ">=" not worse), and who claims it."""

    source: str
    better: str
    relation: str
    worse: str


CFRAG_ABLATIONS = (
    "cfrag_no_user_retrieval", "cfrag_mean_user_emb", "cfrag_no_retriever_tuning", "cfrag_no_sud",
    "cfrag_no_reranker_tuning", "cfrag_no_reranker_eu",
)  # fmt: skip
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
    Claim("prag", "cfrag", ">", "clusterrag_user_only"),
    Claim("prag", "clusterrag_collaborative", ">", "random"),
    Claim("prag", "cfrag", ">", "random"),
    Claim("prag", "best personalized", ">", "dense_global"),
)


def verdict(claim: Claim, diff: Estimate) -> str:
    """holds / not shown / reversed for a paired difference oriented so that positive favours ``claim.better``."""
    if diff.n == 0:
        return "no data"
    if diff.high < 0:
        return REVERSED
    if claim.relation == ">=" or diff.low > 0:
        return HOLDS
    return NOT_SHOWN


def best_personalized(scores: pd.DataFrame, higher_is_better: bool) -> str | None:
    """The personalized method (oracle excluded) with the best mean among those run on the most samples; chosen on
    the same samples it is then tested on, so the comparison is optimistic."""
    mine = scores[scores["method"].isin(PERSONALIZED)]
    counts = mine.groupby("method")["sample_id"].nunique()
    full = counts[counts == counts.max()].index if len(counts) else []
    means = mine[mine["method"].isin(full)].groupby("method")["value"].mean()
    if means.empty:
        return None
    return str(means.idxmax() if higher_is_better else means.idxmin())


def check_claims(
    scores: pd.DataFrame, metric: str, higher_is_better: bool = True, claims: tuple[Claim, ...] = CLAIMS
) -> pd.DataFrame:
    """Every claim on per-sample values (method, sample_id, value) of one task and metric: difference, interval,
    n and verdict. Claims whose methods are missing are left out."""
    wide = scores.pivot_table(index="sample_id", columns="method", values="value", aggfunc="first")
    rows = []
    for claim in claims:
        better = best_personalized(scores, higher_is_better) if claim.better == "best personalized" else claim.better
        if better is None or better not in wide or claim.worse not in wide:
            continue
        both = wide[[better, claim.worse]].dropna()
        a, b = both[better].to_numpy(), both[claim.worse].to_numpy()
        diff = paired_difference(a, b) if higher_is_better else paired_difference(b, a)
        name = claim.better if better == claim.better else f"{claim.better} ({better})"
        rows.append(
            (claim.source, f"{name} {claim.relation} {claim.worse}", metric, diff.value, diff.low, diff.high, diff.n,
             verdict(claim, diff))
        )  # fmt: skip
    columns = ["source", "claim", "metric", "difference", "ci_low", "ci_high", "n_samples", "verdict"]
    return pd.DataFrame(rows, columns=columns)


def _llm_scores(con, task: str) -> tuple[pd.DataFrame, str, bool]:
    """Per-sample primary-metric values of the LLM evaluation (table generations) of one task."""
    from prag_models.metrics import HIGHER_IS_BETTER, per_sample_scores, primary_metric

    gens = con.execute("SELECT method, sample_id, prediction, gold FROM generations WHERE task = ?", [task]).df()
    metric = primary_metric(task)
    if gens.empty:
        return pd.DataFrame(columns=["method", "sample_id", "value"]), metric, HIGHER_IS_BETTER[metric]
    values = per_sample_scores(task, gens["prediction"].astype(str).tolist(), gens["gold"].astype(str).tolist())
    return gens[["method", "sample_id"]].assign(value=values[metric]), metric, HIGHER_IS_BETTER[metric]


def claims_from_store(con) -> pd.DataFrame:
    """Every claim per task on the retrieval evaluation (its primary metric) and on the LLM evaluation."""
    from prag_models.store import table_exists

    frames = []
    if table_exists(con, "lamp_retrieval_sample_scores"):
        primary = con.execute("SELECT DISTINCT task, metric FROM lamp_retrieval_evaluation WHERE is_primary").fetchall()
        for task, metric in sorted(primary):
            scores = con.execute(
                "SELECT method, sample_id, value FROM lamp_retrieval_sample_scores WHERE task = ? AND metric = ?",
                [task, metric],
            ).df()
            frames.append(check_claims(scores, metric).assign(task=task, evaluation="retrieval"))
    if table_exists(con, "generations"):
        for (task,) in sorted(con.execute("SELECT DISTINCT task FROM generations").fetchall()):
            scores, metric, higher = _llm_scores(con, task)
            frames.append(check_claims(scores, metric, higher).assign(task=task, evaluation="llm"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def claims_markdown(table: pd.DataFrame) -> str:
    """One markdown table: claim × (evaluation, task) cells ``verdict Δ ± half-width (n)``, then a tally."""
    if table.empty:
        return "_no evaluation tables: materialize the graph first_"
    t = table.assign(
        cell=[
            f"{v} {d:+.3f} ± {(hi - lo) / 2:.3f} (n={n})"
            for v, d, lo, hi, n in table[["verdict", "difference", "ci_low", "ci_high", "n_samples"]].values
        ],
        column=table["evaluation"] + " " + table["task"],
        row=table["source"] + ": " + table["claim"].str.replace(r" \(.*\)", "", regex=True),
    )
    wide = t.pivot_table(index="row", columns="column", values="cell", aggfunc="first").fillna("")
    tally = table.groupby(["evaluation", "verdict"]).size().unstack(fill_value=0)
    return wide.to_markdown() + "\n\nVerdicts per evaluation:\n\n" + tally.to_markdown()
