"""Does CFRAG's training loop learn, whatever the LLM? Train the retriever and the reranker from a teacher of known
quality (cfrag.feedback_signal = "oracle": the demo's planted relevance, a share cfrag.teacher_noise of the labels
replaced by random scores) and print, per task and teacher noise, the truth NDCG@3 of the trained model against its
untrained initialisation on held-out dev samples (paired 95 % interval, n), for the retriever and the reranker.

    python benchmarks/cfrag_teacher.py [--users 160] [--communities 4] [--family communities] [--dev 32]
                                       [--tasks LaMP-2 LaMP-4]
                                       [--noise 0 0.25 0.5 1] [--kinds retriever reranker] [--home DIR]

Oracle labels cost no LLM call, so the benchmark labels every train sample (cfrag.max_feedback_samples = 0; 128 with
160 users and 32 dev samples) and cfrag.inference_docs_per_user candidates of each similar user (the pool the models
rank at inference), where the graph's LLM budget labels 16 samples x 1 document per user.

Builds a demo world in a fresh home (the graph up to the CFRAG neighbours, in-process, with the fake generator),
then for each noise level labels the training samples through the feedback_labels table and trains with the
training stage's own functions (train_task_retriever, train_task_rerankers: selection and gate included). The
held-out pool of a dev sample is what CFRAG's reranker sees at inference: the top cfrag.inference_docs_per_user
documents by cosine of each of the asker's m similar users; both models rank that whole pool. The initialisations are
the retriever with W at its ridge start and the residual reranker at zero correction (= cosine).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
NOISE = (0.0, 0.25, 0.5, 1.0)


def build_world(
    home: Path, users: int, communities: int, dev: int, tasks: list[str], cfrag: dict, family: str = "communities"
) -> Path:
    """Write a prag.toml under home and materialize the graph up to the CFRAG neighbours (fake generator); a home that
    already holds the world is reused."""
    import dagster as dg

    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import materialize_graph, write_config

    if (home / "prag.toml").exists() and (home / "home").exists():
        return home / "prag.toml"
    from prag_models.config.cfrag import CfragSettings

    data = {"tasks": tasks, "demo_users": users, "demo_communities": communities, "demo_dev_samples": dev,
            "demo_family": family}  # fmt: skip
    # the product's training length unless the caller sets one (write_config's 4 epochs are the unit tests' budget)
    cfrag = {"train_epochs": CfragSettings().train_epochs} | cfrag
    config = write_config(home / "prag.toml", home / "home", generator_backend="fake", cfrag=cfrag,
                          retrieval={"k": 3}, data=data)  # fmt: skip
    selection = dg.AssetSelection.assets("cfrag_similar_users", "user_embeddings").upstream()
    result = materialize_graph(config, tasks, selection=selection)
    if not result.success:
        raise SystemExit("materializing the demo world failed")
    return config


def dev_pools(con, task: str, settings) -> list[dict]:
    """Per dev sample with something to rank: query text and vector, e_u, the inference pool's rows and truth."""
    from prag_models.data.truth import load_truth
    from prag_models.methods.cfrag.candidates import cosine_scorer, per_user_top_k
    from prag_models.methods.cfrag.inference import docs_per_user
    from prag_models.methods.cfrag.tables import neighbour_lists
    from prag_models.methods.task_tables import profile_index
    from prag_models.storage.store import read_rows

    index, _ = profile_index(con, task, default_share=settings.privacy.default_share)
    samples = con.execute(
        "SELECT s.sample_id, s.user_id, s.query, q.embedding FROM lamp_samples s JOIN query_embeddings q "
        "USING (task, sample_id) WHERE task = ? AND s.split = 'dev' ORDER BY s.sample_id", [task]
    ).fetchall()
    users = read_rows(con, "cfrag_user_embeddings", {"task": task})
    e_u = {u: np.asarray(e, dtype=np.float32) for u, e in zip(users["user_id"], users["embedding"], strict=True)}
    neighbours, truth = neighbour_lists(con, task), load_truth(con, task, "dev")
    out = []
    for sample_id, user, query, vector in samples:
        q = np.asarray(vector, dtype=np.float32)
        pool = per_user_top_k(index, user, neighbours.get(user, [user]), docs_per_user(settings),
                              cosine_scorer(index, q))  # fmt: skip
        gains = np.asarray([truth.gain(sample_id, c.doc_id) or 0.0 for c in pool], dtype=np.float32)
        if len(pool) and np.ptp(gains) > 0:
            rows = [c.row for c in pool]
            out.append({"query": query, "q": q, "e_u": e_u[user], "docs": index.vectors[rows],
                        "texts": [index.texts[r] for r in rows], "gains": gains})  # fmt: skip
    return out


def ndcg_at(scores: np.ndarray, gains: np.ndarray, k: int) -> float:
    """Truth NDCG@k of one ranking."""
    from prag_models.methods.cfrag.fit import relevance_ndcg_samples

    return float(relevance_ndcg_samples(scores[None], gains[None], np.ones((1, len(gains)), bool), k)[0])


def model_ndcgs(pools: list[dict], retriever, reranker, k: int) -> dict[str, np.ndarray]:
    """Per held-out sample the truth NDCG@k of the retriever's and the reranker's ranking of the pool."""
    from prag_models.methods.cfrag.reranker import rerank_scores
    from prag_models.methods.cfrag.retriever import retriever_scores

    out: dict[str, list[float]] = {"retriever": [], "reranker": []}
    for p in pools:
        n = len(p["texts"])
        base = p["docs"] @ p["q"]
        s = retriever_scores(retriever, p["q"][None], p["docs"][None], p["e_u"][None])[0]
        r = base if reranker is None else rerank_scores(reranker, [p["query"]] * n, p["texts"],
                                                        np.tile(p["e_u"], (n, 1)), base,
                                                        doc_vectors=p["docs"])  # fmt: skip
        out["retriever"].append(ndcg_at(s, p["gains"], k))
        out["reranker"].append(ndcg_at(r, p["gains"], k))
    return {key: np.asarray(v) for key, v in out.items()}


def initial_retriever(con, task: str, settings, dims: tuple[int, int]):
    """The retriever training starts from: W at the ridge map from e_u to the user's mean document (the init)."""
    import torch

    from prag_models.methods.cfrag.feedback import projection_targets
    from prag_models.methods.cfrag.retriever import PersonalizedRetriever, init_projection

    c = settings.cfrag
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(c.seed)
        model = PersonalizedRetriever(dims[0], dims[1], c.alpha, c.retriever_projection)
        init_projection(model, *projection_targets(con, task))
    return model


def oracle_settings(settings, noise: float):
    """The settings of a run with the oracle teacher at this noise: every train sample labelled, the inference pool's
    documents per user as training candidates (labels are free)."""
    c = settings.cfrag
    return settings.model_copy(update={"cfrag": c.model_copy(update={
        "feedback_signal": "oracle", "teacher_noise": noise, "max_feedback_samples": 0,
        "docs_per_user": c.inference_docs_per_user or c.docs_per_user})})  # fmt: skip


def run_task(con, task: str, settings, noise: float, kinds: tuple[str, ...] = ("retriever", "reranker")) -> dict:
    """Label with the oracle at this noise, train the models as the training stage does, score on dev."""
    from prag_models.llm.fake import FakeGenerator
    from prag_models.methods.cfrag.feedback import label_task
    from prag_models.methods.cfrag.training import train_task_rerankers, train_task_retriever
    from prag_models.metrics.intervals import paired_difference

    s = oracle_settings(settings, noise)
    generator = FakeGenerator()
    label_task(con, task, s, generator)
    started = time.perf_counter()
    retriever = train_task_retriever(con, task, s, generator.model_id)
    reranker = train_task_rerankers(con, task, s, generator.model_id, kinds=("reranker",))[0] if (
        "reranker" in kinds) else None
    seconds = time.perf_counter() - started
    pools = dev_pools(con, task, s)
    k = max(1, s.cfrag.final_k or s.retrieval.k)
    dims = (retriever.model.user_dim, retriever.model.doc_dim)
    trained = model_ndcgs(pools, retriever.model, reranker.model if reranker else None, k)
    init = model_ndcgs(pools, initial_retriever(con, task, s, dims), None, k)
    out = {"seconds": seconds, "alpha": retriever.model.effective_alpha()}
    for kind, fitted in (("retriever", retriever), ("reranker", reranker)):
        if fitted is None:
            continue
        est = paired_difference(trained[kind], init[kind])
        summary = fitted.summary()
        why = summary.get("gate", "") or f"no epoch beat epoch 0 on validation ({summary['epochs_run']} run)"
        out[kind] = (float(trained[kind].mean()), float(init[kind].mean()), est, why)
    return out


def main() -> None:
    """Print one row per task, teacher noise and model."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default="", help="folder for the world (default: a temporary one)")
    parser.add_argument("--users", type=int, default=160)
    parser.add_argument("--communities", type=int, default=4)
    parser.add_argument("--family", default="communities", choices=["communities", "split_taste", "no_community"],
                        help="the demo family (docs/demo_data.md)")
    parser.add_argument("--dev", type=int, default=32)
    parser.add_argument("--tasks", nargs="*", default=["LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4", "LaMP-5", "LaMP-7"])
    parser.add_argument("--noise", nargs="*", type=float, default=list(NOISE))
    parser.add_argument("--epochs", type=int, default=0,
                        help="cfrag.train_epochs, up to which training runs with early stopping (0 = the default, 30)")
    parser.add_argument("--kinds", nargs="*", default=["retriever", "reranker"], choices=["retriever", "reranker"])
    args = parser.parse_args()
    from prag_models.config.cfrag import CfragSettings

    cfrag = {"reranker_max_length": 64, "train_epochs": args.epochs or CfragSettings().train_epochs}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(args.home).resolve() if args.home else Path(tmp)
        home.mkdir(parents=True, exist_ok=True)
        config = build_world(home, args.users, args.communities, args.dev, args.tasks, cfrag, args.family)
        import duckdb

        from prag_models.config.settings import load_settings

        settings = load_settings(config)
        # the training knobs of this run, also over a reused home whose prag.toml was written by another run
        settings = settings.model_copy(update={"cfrag": settings.cfrag.model_copy(update=cfrag)})
        d = settings.data
        print(f"demo world ({d.demo_family}): {d.demo_users} users, {d.demo_communities} communities, "
              f"{d.demo_dev_samples} dev samples; "
              f"teacher = oracle (planted relevance) with noise; NDCG@{settings.cfrag.final_k or settings.retrieval.k}"
              " on held-out dev samples, trained − initialisation with its paired 95 % interval\n")  # fmt: skip
        c = settings.cfrag
        print(f"training up to {c.train_epochs} epochs (early stopping after {c.early_stopping_patience} without "
              f"improvement on {c.validation_share:.0%} of the labelled samples held out for validation)")
        print(f"every train sample labelled, {settings.cfrag.inference_docs_per_user} documents per similar user; "
              f"retriever α starts at {settings.cfrag.alpha:g} (learnt: cfrag.learn_alpha)\n")
        print("| task | teacher noise | model | trained | initialisation | trained − init [95 %] | n | gate |")
        print("|---|---|---|---|---|---|---|---|")
        con = duckdb.connect(str(settings.duckdb_path))
        try:
            for task in args.tasks:
                for noise in args.noise:
                    row = run_task(con, task, settings, noise, tuple(args.kinds))
                    for kind in args.kinds:
                        trained, init, est, gate = row[kind]
                        learnt = f" (α {row['alpha']:.2f})" if kind == "retriever" else ""
                        print(f"| {task} | {noise:g} | {kind} | {trained:.3f} | {init:.3f} | {est.value:+.3f} "
                              f"[{est.low:+.3f}, {est.high:+.3f}] | {est.n} | {gate.split(':')[0]}{learnt} |",
                              flush=True)
        finally:
            con.close()


if __name__ == "__main__":
    main()
