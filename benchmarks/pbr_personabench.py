"""PBR retrieval on a real PersonaBench community (the one --data names, else community_1; replayed expansions) and
the LongMemEval sample (docs/methods.md §4).

    python benchmarks/pbr_personabench.py --data ../shared/data [--theta 0.5 0.75 --k2 5] [--generate] [--tune]

Runs Base, PBR, PBR w/o P-Anchor and PBR w/o P-PRF with the packaged all-MiniLM-L6-v2 and the PBR authors' cached
gpt-4o-mini expansions, and prints per-category tables next to the paper's Table 1 all-MiniLM-L6-v2 row. On
LongMemEval it runs Base and w/o P-PRF (no LLM needed); PBR there needs generated expansions (``--generate``).
``--tune`` also tunes PBR's knobs cross-fitted over the persons (docs/methods.md §4.7) and prints the held-out gain
over the authors' settings.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prag_models.config.settings import EmbedderSettings, PbrSettings, load_settings  # noqa: E402
from prag_models.data.longmemeval import load_longmemeval  # noqa: E402
from prag_models.data.personabench import CATEGORIES, community_dir, load_personabench  # noqa: E402
from prag_models.methods.pbr_eval import EmbeddingCache, build_pbr_expansions, evaluate_retrieval  # noqa: E402

METHOD_LABELS = {"base": "Base", "pbr": "PBR", "pbr_wo_anchor": "w/o P-Anchor", "pbr_wo_prf": "w/o P-PRF"}
#: Paper Table 1, PersonaBench Overall, all-MiniLM-L6-v2: (R@5, N@5).
PAPER = {"base": (0.3783, 0.3074), "pbr": (0.4516, 0.3855), "pbr_wo_anchor": (0.4382, 0.3729),
         "pbr_wo_prf": (0.2860, 0.2449)}
#: docs/methods.md §4.2: the authors' cached expansions replayed with all-MiniLM-L6-v2, PBR Overall (R@5, N@5) per
#: theta.
REPLAY_REFERENCE = {0.5: (0.442, 0.379), 0.75: (0.450, 0.384)}
NEW_TOKENS = 512  # generation budget of each P-PRF reply


def _pivot(df: pd.DataFrame, metric: str, k: int, categories: list[str]) -> pd.DataFrame:
    """Methods x categories table of one metric at one K."""
    sub = df[(df.metric == metric) & (df.k == k)]
    table = sub.pivot_table(index="method", columns="category", values="value", sort=False)
    table = table.reindex(columns=[c for c in categories if c in table.columns])
    return table.rename(index=METHOD_LABELS)


def _markdown(table: pd.DataFrame, title: str) -> str:
    """A small markdown table with 4-decimal values."""
    cols = list(table.columns)
    lines = [f"**{title}**", "", "| method | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in table.iterrows():
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.4f}" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _counts(df: pd.DataFrame, categories: list[str]) -> str:
    """'category n' summary of the question counts."""
    sub = df[(df.metric == "recall") & (df.k == df.k.min())].drop_duplicates("category")
    n = dict(zip(sub.category, sub.n_questions, strict=True))
    return ", ".join(f"{c} {n[c]}" for c in categories if c in n)


def community_read(data: Path) -> str:
    """The PersonaBench community load_personabench reads for --data: the community folder itself when --data names
    one (e.g. .../personabench/community_0), else community_1 under it."""
    return community_dir(data).name


def title(data: Path, theta: float, k2: int, seconds: float, noise: str = "0.0") -> str:
    """The heading of the PersonaBench tables, naming the community actually read."""
    return (f"## PersonaBench {community_read(data)} (noise {noise}) — theta={theta}, k2={k2}, replayed expansions "
            f"({seconds:.0f} s)")

def personabench(data: Path, embedder: EmbeddingCache, theta: float, k2: int, k1: int) -> pd.DataFrame:
    """One PersonaBench community (the one --data names, else community_1) with the authors' cached expansions;
    prints the tables, returns the results."""
    pb = load_personabench(data)
    community = community_read(data)
    settings = PbrSettings(k1=k1, theta=theta, k2=k2, top_k=10)
    methods = list(METHOD_LABELS)
    start = time.perf_counter()
    df = evaluate_retrieval(pb.questions, pb.segments_by_user, embedder, methods, pb.expansions, settings)
    cats = [*CATEGORIES, "Overall"]
    print(f"\n{title(data, theta, k2, time.perf_counter() - start)}\n")
    print(f"{len(pb.questions)} questions ({_counts(df, cats)}); skipped {pb.skipped}; "
          f"{sum(len(s) for s in pb.segments_by_user.values())} segments over {len(pb.segments_by_user)} persons\n")
    for metric, label in (("recall", "R"), ("ndcg", "N")):
        print(_markdown(_pivot(df, metric, 5, cats), f"{label}@5 per category"))
    lines = ["| method | R@5 | N@5 | paper R@5 | paper N@5 | R@1 | R@3 | R@10 | N@1 | N@3 | N@10 |", "|---" * 11 + "|"]
    overall = df[df.category == "Overall"].set_index(["method", "metric", "k"])["value"]
    for m in methods:
        vals = [overall[(m, "recall", 5)], overall[(m, "ndcg", 5)], *PAPER[m]]
        vals += [overall[(m, "recall", k)] for k in (1, 3, 10)] + [overall[(m, "ndcg", k)] for k in (1, 3, 10)]
        lines.append(f"| {METHOD_LABELS[m]} | " + " | ".join(f"{v:.4f}" for v in vals) + " |")
    print("**Overall vs paper Table 1 (all-MiniLM-L6-v2)**\n\n" + "\n".join(lines) + "\n")
    print("The paper's rows (and METHODS' reference figures) average communities 0 and 1 together: the authors' "
          f"eval_rag_PBR.py appends both communities' results before scoring. Only {community} is read here.\n")
    if theta in REPLAY_REFERENCE:
        r, n = REPLAY_REFERENCE[theta]
        print(f"docs/methods.md §4.2 replay reference for PBR at theta={theta}: R@5 ≈ {r} / N@5 ≈ {n}\n")
    return df.assign(theta=theta, k2=k2)


def tuned(data: Path, embedder: EmbeddingCache, folds: int, trials: int, budget_s: float) -> None:
    """PBR's knobs tuned cross-fitted over the persons of the community read (docs/methods.md §4.7): per fold the
    values chosen on the other persons and the held-out N@5 against the authors' settings, then the paired gain."""
    from prag_models.config.settings import TuningSettings
    from prag_models.evaluation.pbr_tuning import tune_pbr
    from prag_models.stages.pbr_tuning import pbr_vectors

    pb = load_personabench(data)
    vectors = pbr_vectors(pb.questions, pb.segments_by_user, pb.expansions, embedder)
    start = time.perf_counter()
    result = tune_pbr("personabench", vectors, PbrSettings(top_k=10), TuningSettings(max_trials=trials,
                      budget_s=budget_s), folds)  # fmt: skip
    print(f"\n## PBR's knobs tuned on the other persons (cross-fitted, {result.stats['folds']} folds, "
          f"{time.perf_counter() - start:.0f} s)\n")
    print("| fold | questions searched | held out | chosen (default: θ 0.5, k2 5, weights 1 / 1 / 1) | train N@5 "
          "default → chosen |\n|---|---|---|---|---|")
    for fold, rows in result.rows.groupby("fold", sort=False):
        first = rows.iloc[0]
        chosen = ", ".join(f"{r.knob.split('.')[1]} {r.value}" for r in rows.itertuples() if r.value != r.default_value)
        print(f"| {fold} | {first.n_questions} | {first.held_out} | {chosen or 'the default (kept)'} | "
              f"{first.default_score:.4f} → {first.score:.4f} |")
    st = result.stats
    print(f"\nheld-out N@5: tuned {st['held_out_tuned']:.4f}, authors' settings {st['held_out_default']:.4f}, "
          f"tuned − authors {st['held_out_gain']:+.4f} [{st['held_out_gain_low']:+.4f}, "
          f"{st['held_out_gain_high']:+.4f}] (paired 95 % interval, n = {st['questions']})\n")


def longmemeval(data: Path, embedder: EmbeddingCache, generate: bool, theta: float, k2: int) -> pd.DataFrame:
    """LongMemEval sample: Base and w/o P-PRF; PBR and w/o P-Anchor too when generating expansions."""
    questions, segments = load_longmemeval(data)
    settings = PbrSettings(k1=10, theta=theta, k2=k2, top_k=10, expansion_source="generate" if generate else "replay")
    methods = ["base", "pbr_wo_prf"]
    expansions = {}
    if generate:
        try:
            from prag_models.llm.factory import make_generator
        except ImportError:
            print("\n(--generate: prag_models.llm.factory.make_generator is not available; PBR skipped)")
        else:
            gen_settings = load_settings().generator
            generator = make_generator(gen_settings)
            budget = gen_settings.n_ctx - NEW_TOKENS - 300  # room for the instructions and the question
            start = time.perf_counter()
            expansions = build_pbr_expansions(generator, questions, segments, embedder, settings, NEW_TOKENS, budget)
            fallbacks = pd.Series([e.parse_fallback for e in expansions.values()]).value_counts().to_dict()
            print(f"\n(generated P-PRF expansions with {generator.model_id} in {time.perf_counter() - start:.0f} s; "
                  f"parse fallbacks {fallbacks})")
            methods = list(METHOD_LABELS)
    else:
        print("\n(LongMemEval PBR and w/o P-Anchor need LLM expansions: rerun with --generate)")
    df = evaluate_retrieval(questions, segments, embedder, methods, expansions, settings)
    print(f"\n## LongMemEval_S sample — {len(questions)} questions, theta={theta}, k2={k2}, k1=10\n")
    overall = df[df.category == "Overall"]
    for metric, label in (("recall_any", "recall_any"), ("ndcg", "NDCG")):
        table = overall[overall.metric == metric].pivot_table(index="method", columns="k", values="value", sort=False)
        table.columns = [f"{label}@{k}" for k in table.columns]
        print(_markdown(table.rename(index=METHOD_LABELS), f"{label}@K (Overall)"))
    print("Paper (LongMemEval-s, 500 questions): Base R@5 0.8568 → PBR 0.8640 — 3 questions here, not comparable.\n")
    return df


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run both datasets, optionally write the long results table."""
    default_data = os.environ.get("PRAG_REAL_DATA", "../shared/data")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=default_data, help="shared data folder (relative paths: to the repo root)")
    parser.add_argument("--theta", type=float, nargs="+", default=[0.5], help="P-Anchor threshold(s)")
    parser.add_argument("--k2", type=int, default=5)
    parser.add_argument("--k1", type=int, default=5)
    parser.add_argument("--lme-theta", type=float, default=0.75)
    parser.add_argument("--lme-k2", type=int, default=10)
    parser.add_argument("--generate", action="store_true", help="generate LongMemEval expansions with the LLM")
    parser.add_argument("--embedder", default=EmbedderSettings().model)
    parser.add_argument("--datasets", nargs="+", choices=["personabench", "longmemeval"],
                        default=["personabench", "longmemeval"])
    parser.add_argument("--out", default="", help="optional CSV of all result rows")
    parser.add_argument("--tune", action="store_true", help="also tune PBR's knobs, cross-fitted over persons")
    parser.add_argument("--tune-folds", type=int, default=5)
    parser.add_argument("--tune-trials", type=int, default=40)
    parser.add_argument("--tune-budget", type=float, default=30.0, help="seconds for all folds' searches")
    args = parser.parse_args(argv)
    data = Path(args.data).expanduser()
    if not data.is_absolute():
        data = (ROOT / data).resolve()
    if not data.exists():
        raise SystemExit(f"data folder {data} does not exist (set --data or PRAG_REAL_DATA)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from prag_models.text.embedder import load_embedder

    embedder = EmbeddingCache(load_embedder(EmbedderSettings(model=args.embedder)))
    frames = []
    if "personabench" in args.datasets:
        frames += [personabench(data, embedder, theta, args.k2, args.k1) for theta in args.theta]
        if args.tune:
            tuned(data, embedder, args.tune_folds, args.tune_trials, args.tune_budget)
    if "longmemeval" in args.datasets:
        frames.append(longmemeval(data, embedder, args.generate, args.lme_theta, args.lme_k2))
    if args.out:
        pd.concat(frames, ignore_index=True).to_csv(args.out, index=False)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
