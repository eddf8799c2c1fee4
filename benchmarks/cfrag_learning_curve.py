"""Does CFRAG's reranker learn on this data? Train it on a task's feedback labels without selection or gate and print
the truth NDCG@k of its candidate ranking on the held-out train samples (no feedback label, never trained on) after
every epoch.

    python benchmarks/cfrag_learning_curve.py [--home .prag] [--tasks LaMP-2 LaMP-4] [--epochs 12]

Reads a finished `prag materialize` (feedback labels, CFRAG user embeddings, the relevance truth of the demo) read-only
and trains fresh rerankers in memory (nothing is written or registered). Epoch 0 is the untrained residual reranker,
i.e. cosine. This is what the training asset's selection and significance gate decide on a few samples; here the
whole curve is visible, so a reader can see whether training moves the ranking towards the truth at all.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import duckdb
import numpy as np


def curve(con, task: str, settings, epochs: int) -> tuple[list[float], int]:
    """Held-out truth NDCG per epoch (epoch 0 = untrained) and the number of held-out samples."""
    import torch

    from prag_models.methods.cfrag import reranker as rr
    from prag_models.methods.cfrag.feedback import load_training_set
    from prag_models.methods.cfrag.fit import relevance_ndcg_samples
    from prag_models.methods.cfrag.training import with_truth_validation
    from prag_models.methods.cfrag.training_set import new_reranker, rerank_samples

    generator = con.execute("SELECT DISTINCT generator_id FROM feedback_labels WHERE task = ?", [task]).fetchall()
    if not generator:
        raise SystemExit(f"{task}: no feedback labels: materialize feedback_labels first")
    inputs, labelled, _, _ = load_training_set(con, task, settings, generator[0][0])
    ts, truth, held, extra = with_truth_validation(con, task, settings, inputs, labelled)
    if truth is None or not held:
        raise SystemExit(f"{task}: no relevance truth or no held-out train samples to measure on")
    queries = dict(zip(inputs.samples["sample_id"], inputs.samples["query"], strict=True)) | extra
    samples = rerank_samples(ts, queries, inputs.index.texts)
    n_train, k = len(samples) - held, max(1, settings.cfrag.final_k or settings.retrieval.k)
    gains = np.nan_to_num(truth[n_train:], nan=0.0)
    torch.manual_seed(settings.cfrag.seed)
    model = new_reranker(settings.cfrag, int(ts.user_emb.shape[1]))
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.cfrag.train_lr)
    rng = np.random.default_rng(settings.cfrag.seed)

    def held_out() -> float:
        model.eval()
        with torch.no_grad():
            student, _, mask = rr._batch_scores(model, samples[n_train:])
        width = student.shape[1]
        return float(np.nanmean(relevance_ndcg_samples(student.numpy(), gains[:, :width], mask.numpy(), k)))

    values = [held_out()]
    for _ in range(epochs):
        model.train()
        order = rng.permutation(n_train)
        for start in range(0, n_train, settings.cfrag.train_batch_size):
            batch = [samples[i] for i in order[start : start + settings.cfrag.train_batch_size]]
            loss = rr.kl_loss(*rr._batch_scores(model, batch), settings.cfrag.reranker_temperature)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        values.append(held_out())
    return values, held


def main() -> None:
    """Print one learning curve per task."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=str(Path(__file__).resolve().parent.parent / ".prag"))
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    os.environ["PRAG_HOME"] = str(Path(args.home).resolve())
    from prag_models.config.settings import load_settings

    settings = load_settings()
    path = settings.duckdb_path
    if not path.exists():
        raise SystemExit(f"{path} does not exist: run `prag materialize` (or scripts/demo.sh) first")
    con = duckdb.connect(str(path), read_only=True)
    try:
        tasks = args.tasks or [t for (t,) in con.execute("SELECT DISTINCT task FROM feedback_labels").fetchall()]
        print("| task | held-out samples | truth NDCG@k per epoch (0 = untrained = cosine) | best − epoch 0 |")
        print("|---|---|---|---|")
        for task in sorted(tasks):
            values, held = curve(con, task, settings, args.epochs)
            per_epoch = " ".join(f"{v:.3f}" for v in values)
            print(f"| {task} | {held} | {per_epoch} | {max(values[1:]) - values[0]:+.3f} |")
    finally:
        con.close()


if __name__ == "__main__":
    main()
