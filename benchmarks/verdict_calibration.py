"""How often does the verdict ship? Its false-ship rate on worlds generated without anything collaboration could add,
and its ship rate where it can, measured on many small demo worlds, each rate with a Wilson 95 % interval and the
number of worlds.

    python benchmarks/verdict_calibration.py [--family communities split_taste no_community alike_communities tagging]
        [--worlds 20] [--task LaMP-2] [--users 64] [--communities 4] [--dev-samples 32] [--seed-start 1000]
        [--self-test 0] [--jobs 1] [--user-similarity taste] [--with-cfrag] [--workdir DIR [--reuse]]

Each world is a demo (prag_models/data/demo.py) of the family named by the setting ``data.demo_family`` (env
``PRAG__DATA__DEMO_FAMILY``; docs/demo_data.md "Families") and the seed ``data.demo_seed``. Where collaboration can
help: "communities" (the community decides the label), "split_taste" (users who write about the same topics judge
them differently) and "tagging" (items recur across users; for some items the user's taste decides the label). Where
it cannot, by how the world is generated: "no_community" (no community structure: only the user's own history
carries its labels) and "alike_communities" (communities write apart but label alike, so no community's documents
carry a better label than everybody's). For each world the retrieval stages and the LLM-free retrieval evaluation
run in-process (Dagster ``materialize`` of the assets up to ``lamp_retrieval_evaluation``, no asset checks, the fake
generator, never an LLM), and the verdict of prag_models/evaluation/verdict.py is read from the world's DuckDB file.
The candidates are the ClusterRAG modes (collaborative, hybrid, two-stage, community-wide) and item_cf;
``--with-cfrag`` adds CFRAG with short training (a few epochs: slower, and not the default run's CFRAG).

A family where collaboration cannot help counts every "ship" as a false ship; the goal is a false-ship rate whose
Wilson upper bound is at most 5 % — with no false ship at all that takes at least 73 worlds. Each world is a separate
seed and one task, so its decision is independent of the others'. Families the generator does not know are reported
as failed. Prints one line per world as it finishes (with its seconds) and a summary.

``--self-test N`` adds a **sign-flip self-test**, a test of the test and not a calibration: per world N copies of its
per-sample scores in which, per sample with probability 1/2, every candidate's difference to ``dense_global`` is
mirrored (value ↦ 2·baseline − value). That is exactly the null the verdict's sign-flip test
(prag_models/evaluation/selection_test.py) assumes, so its ship rate is at most 2.5 % by construction whenever the
test is implemented right (and mirrored NDCG values can leave [0, 1]): it checks the code, it says nothing about
worlds. Copies of one world share its samples, so their Wilson interval is approximate.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

#: Whether personalization through collaboration can beat searching everybody's documents in each family's worlds
#: (the demo's design: docs/demo_data.md). A "ship" where it cannot is a false ship.
CAN_HELP = {"communities": True, "split_taste": True, "no_community": False, "alike_communities": False,
            "tagging": True}  # fmt: skip
#: Suffix of a family's sign-flip self-test rows: the verdict's own null, a check of the test's code, not of worlds.
SELF_TEST = " sign-flip self-test"
WILSON_GOAL = 0.05


def write_world_config(path: Path, home: Path, family: str, seed: int, args: argparse.Namespace) -> Path:
    """A prag.toml for one small world: the family, the seed, the fake generator."""
    data = {"tasks": [args.task], "demo_users": args.users, "demo_communities": args.communities,
            "demo_dev_samples": args.dev_samples, "demo_seed": seed, "llm_eval_samples": 4,
            "demo_family": family}  # fmt: skip
    sections = {
        "data": data, "generator": {"backend": "fake", "threads": 1}, "retrieval": {"k": 3},
        "cfrag": {"epochs": 2, "train_epochs": 2},
    }  # fmt: skip
    if args.user_similarity:
        sections["clustering"] = {"user_similarity": args.user_similarity}
    if args.label_free:  # the world's LaMP files without their manifest (the planted labels), the packaged LLM
        from prag_models.data.demo import write_demo

        files = path.parent / "lamp"
        write_demo(files, users=args.users, communities=args.communities, dev_samples=args.dev_samples, seed=seed,
                   tasks=[args.task], family=family)  # fmt: skip
        (files / "demo_manifest.json").unlink()
        data |= {"source": "lamp", "lamp_dir": str(files)}
        tuning = {"enabled": args.tuning} | ({} if args.tuning else {"utility_trials": 0})
        sections |= {"generator": {"threads": args.threads}, "tuning": tuning,
                     "run": {"llm_budget_s": 0}, "utility": {"max_samples": args.dev_samples}}  # fmt: skip
    import tomli_w

    path.write_text(tomli_w.dumps({"home": str(home), **sections}), encoding="utf-8")
    return path


def selection(with_cfrag: bool, label_free: bool = False):  # noqa: ANN201
    """The assets up to lamp_retrieval_evaluation (label-free: up to llm_utility), without PBR (needs an LLM) and,
    unless asked, without CFRAG."""
    import dagster as dg

    from prag_assets.definitions import defs

    wanted = dg.AssetSelection.assets("llm_utility" if label_free else "lamp_retrieval_evaluation").upstream()
    keys = wanted.resolve(defs.resolve_asset_graph())
    drop = [k for k in keys if k.path[-1].startswith("pbr") or (not with_cfrag and (
        k.path[-1].startswith("cfrag") or k.path[-1] == "feedback_labels"))]  # fmt: skip
    return wanted - dg.AssetSelection.assets(*drop) if drop else wanted


def run_world(family: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    """Materialize one world's retrieval evaluation in-process and return its verdict row (plus seconds)."""
    import dagster as dg
    import duckdb

    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources
    from prag_models.config.settings import load_settings
    from prag_models.evaluation.claims import retrieval_scores
    from prag_models.evaluation.verdict import verdicts_from_store

    folder = root / f"{family}-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    config = write_world_config(folder / "prag.toml", folder / "home", family, seed, args)
    start = time.perf_counter()
    done = folder / "home" / "materialized"
    if not (args.reuse and done.exists()):  # --reuse: re-decide a world already materialized in --workdir
        result = dg.materialize(
            list(defs.assets), resources=default_resources(config_file=str(config)),
            selection=selection(args.with_cfrag, args.label_free), partition_key=args.task, raise_on_error=False,
        )  # fmt: skip
        if not result.success:
            return {"family": family, "seed": seed, "verdict": "failed", "seconds": time.perf_counter() - start}
        done.write_text(f"{time.perf_counter() - start:.1f}", encoding="utf-8")
    seconds = float(done.read_text(encoding="utf-8"))
    con = duckdb.connect(str(folder / "home" / "prag.duckdb"), read_only=True)
    try:
        minimum = load_settings(config).utility.min_samples
        table = verdicts_from_store(con, [args.task], min_utility_samples=minimum)
        scores = [s for t, _, s in retrieval_scores(con) if t == args.task]
    finally:
        con.close()
    if table.empty:
        return {"family": family, "seed": seed, "verdict": "no verdict", "seconds": seconds}
    row = table.iloc[0].to_dict()
    self_test = self_test_verdicts(scores[0], args.self_test, seed) if scores and args.self_test else []
    return {"family": family, "seed": seed, "seconds": seconds, "self_test": self_test, **{k: row[k] for k in (
        "verdict", "cross_fitted_methods", "gain", "gain_low", "gain_high", "n_samples")}}  # fmt: skip


def self_test_verdicts(scores, draws: int, seed: int) -> list[str]:  # noqa: ANN001
    """Verdicts on ``draws`` sign-flipped copies of a world's per-sample scores (the sign-flip test's own null: a
    self-test of the verdict's code, at most 2.5 % ships by construction)."""
    import numpy as np

    from prag_models.evaluation.claims import PERSONALIZED
    from prag_models.evaluation.verdict import BASELINE, task_verdict

    base = scores[scores["method"] == BASELINE].drop_duplicates("sample_id").set_index("sample_id")["value"]
    mine = scores[scores["method"].isin(PERSONALIZED) & scores["sample_id"].isin(base.index)]
    rng = np.random.default_rng([seed, 7919])
    verdicts = []
    for _ in range(draws):
        flip = dict(zip(base.index, rng.random(len(base)) < 0.5, strict=True))
        b = mine["sample_id"].map(base)
        mirrored = np.where(mine["sample_id"].map(flip).to_numpy(dtype=bool), 2 * b - mine["value"], mine["value"])
        flipped = pd.concat([mine.assign(value=mirrored), scores[scores["method"] == BASELINE]], ignore_index=True)
        verdict = task_verdict(flipped, "self-test")
        verdicts.append(verdict["verdict"] if verdict else "no verdict")
    return verdicts


def summarize(rows: list[dict]) -> str:
    """Per family: worlds, ships, the ship (or false-ship) rate with its Wilson 95 % interval, seconds per world; then,
    apart, the sign-flip self-test (a check of the test's code, not a false-ship rate of any world)."""
    worlds = pd.DataFrame(rows)
    self_test = [{"family": r["family"] + SELF_TEST, "verdict": v, "seconds": 0.0} for r in rows
                 for v in r.get("self_test", [])]  # fmt: skip
    lines = ["| family | collaboration can help | worlds | ship | own profile | keep | hurts | failed | rate "
             "| Wilson 95 % | s / world |", "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    notes: list[str] = []
    for family, part in worlds.groupby("family", sort=False):
        line, high, n = _family_line(part, CAN_HELP.get(family, True), f"{part['seconds'].mean():.1f}")
        lines.append(line)
        if not CAN_HELP.get(family, True):
            goal = "met" if high <= WILSON_GOAL else "not met"
            notes.append(f"false-ship goal (Wilson upper bound ≤ {WILSON_GOAL:.0%}) for {family}: {goal}"
                         f" (upper bound {high:.3f} from {n} worlds)")  # fmt: skip
    text = "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")
    if self_test:
        text += ("\n\nSign-flip self-test (not a calibration: the copies are drawn from the null the sign-flip test "
                 "assumes, so at most 2.5 % ship when the code is right):\n\n" + "\n".join(lines[:2]))  # fmt: skip
        for _, part in pd.DataFrame(self_test).groupby("family", sort=False):
            text += "\n" + _family_line(part, False, "—")[0]
    return text


def _family_line(part: pd.DataFrame, helps: bool, seconds: str) -> tuple[str, float, int]:
    """One summary row (verdict counts, the rate and its Wilson interval), the interval's upper bound and n."""
    from prag_models.evaluation.verdict import SHIP
    from prag_models.metrics.intervals import wilson

    decided = part[~part["verdict"].isin(["failed", "no verdict"])]
    n, ships = len(decided), int((decided["verdict"] == SHIP).sum())
    low, high = wilson(ships, n)
    what = "ship rate" if helps else "false-ship rate"
    counts = decided["verdict"].value_counts()
    line = (f"| {part['family'].iloc[0]} | {'yes' if helps else 'no'} | {n} | {ships} "
            f"| {int(counts.get('own profile suffices', 0))} | {int(counts.get('keep the baseline', 0))} "
            f"| {int(counts.get('personalization hurts', 0))} | {len(part) - n} "
            f"| {what} {ships / n if n else 0:.3f} | [{low:.3f}, {high:.3f}] | {seconds} |")  # fmt: skip
    return line, high, n


def label_free_note(args: argparse.Namespace) -> str:
    """The header's words on labels and tuning."""
    return f", without labels, tuning {'on' if args.tuning else 'off'}" if args.label_free else ""


def _report(row: dict) -> dict:
    """Print one world's verdict as it finishes (stderr) and return the row."""
    gain = f" {row['gain']:+.3f} [{row['gain_low']:+.3f}, {row['gain_high']:+.3f}]" if "gain" in row else ""
    print(f"{row['family']} seed {row['seed']}: {row['verdict']}{gain} {row.get('cross_fitted_methods', '')} "
          f"({row['seconds']:.1f} s)", file=sys.stderr, flush=True)  # fmt: skip
    return row


def main() -> None:
    """Run the worlds of each family and print each verdict and the summary."""
    from prag_models.config.settings import USER_SIMILARITIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", nargs="+", default=list(CAN_HELP), choices=list(CAN_HELP))
    parser.add_argument("--worlds", type=int, default=20, help="worlds (seeds) per family")
    parser.add_argument("--seed-start", type=int, default=1000, help="first demo seed (the default run uses 7)")
    parser.add_argument("--task", default="LaMP-2")
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--communities", type=int, default=4)
    parser.add_argument("--dev-samples", type=int, default=32)
    parser.add_argument(
        "--self-test",
        type=int,
        default=0,
        help="sign-flip self-test copies per world (0: none): a check of the test's code, not of worlds",
    )
    parser.add_argument(
        "--user-similarity",
        default="",
        choices=("", *USER_SIMILARITIES),
        help="clustering.user_similarity (default: the setting's)",
    )
    parser.add_argument("--with-cfrag", action="store_true", help="add CFRAG (2 training epochs; slower)")
    parser.add_argument(
        "--label-free",
        action="store_true",
        help="the world's LaMP files without their planted "
        "labels (source lamp): a task no label sees is decided by the LLM utility with the packaged "
        "generator (docs/methods.md §6.7); use a LaMP-4/5/7 --task",
    )
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads with --label-free")
    parser.add_argument(
        "--tuning",
        action="store_true",
        help="with --label-free: the tuning by the LLM utility, as by default (tuning.utility_trials per method "
        "on tuning.utility_samples train samples); without it every knob keeps its default",
    )
    parser.add_argument("--workdir", default="", help="where the worlds' homes go (default: a temporary folder)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="re-decide the worlds already materialized in --workdir "
        "(after a change to the verdict) instead of materializing them again",
    )
    parser.add_argument("--jobs", type=int, default=1, help="worlds at once, one process each (one per free core)")
    args = parser.parse_args()
    os.environ.setdefault("PRAG_CHUNK_ROWS", "4096")
    if args.jobs > 1:  # one BLAS / torch thread per process: the processes share the cores
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[name] = "1"
    seeds = range(args.seed_start, args.seed_start + args.worlds)
    worlds = [(family, seed) for family in args.family for seed in seeds]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="prag-calibration-") as tmp:
        root = Path(args.workdir or tmp)
        if args.jobs > 1:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(args.jobs) as pool:
                futures = [pool.submit(run_world, family, seed, args, root) for family, seed in worlds]
                for future in as_completed(futures):
                    rows.append(_report(future.result()))
        else:
            rows = [_report(run_world(family, seed, args, root)) for family, seed in worlds]
    if rows:
        print(f"\nVerdict calibration: {args.task}, {args.users} users, {args.communities} communities, "
              f"user similarity {args.user_similarity or 'default'}, "
              f"{args.dev_samples} dev samples per world, seeds {args.seed_start}–{args.seed_start + args.worlds - 1}"
              f"{', with CFRAG' if args.with_cfrag else ''}"
              f"{label_free_note(args)}\n")  # fmt: skip
        print(summarize(rows))


if __name__ == "__main__":
    main()
