"""What the MLflow registry says of the CFRAG models in words: the registered model's description (what it is, its
task, how to load or serve it) and each version's short description with its key figures (4 significant digits);
the rest of a version's record is in its tags and on its run (prag_models.mlops.registry)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prag_models.mlops.runs import sig

#: What each model kind is (registered-model descriptions), docs/methods.md §2.
KIND_DESCRIPTIONS: dict[str, str] = {
    "user_encoder": "CFRAG user encoder (docs/methods.md §2.1–2.2): the user's document history -> e_u, trained "
    "contrastively; e_u selects the top-m similar users.",
    "retriever": "CFRAG personalized retriever (§2.4): (1-α)·cos(q, d) + α·cos(W e_u, d), distilled from LLM "
    "feedback where the feedback probe shows teacher headroom (else registered at its initialisation: each version "
    "says which); k documents per similar user.",
    "reranker": "CFRAG personalized reranker (§2.7): cross-encoder CLS ⊕ W₂e_u -> MLP, residual on cos(q, d), "
    "distilled from LLM feedback where the feedback probe shows teacher headroom (else registered at its "
    "initialisation: each version says which); the final top-k. The serving model of full CFRAG.",
    "reranker_no_eu": "CFRAG reranker without e_u (§2.8 ablation 'w/o e_u in reranker').",
}


def model_description(name: str, tags: Mapping[str, str], pyfunc: bool) -> str:
    """The registered model's description: what it is, its task, how to load or serve it."""
    kind, task = tags.get("kind", ""), tags.get("task", "")
    what = KIND_DESCRIPTIONS.get(kind, f"prag model {name}.")
    lines = [what, f"Task: {task}." if task else "", "Aliases: champion (served), challenger (newest version)."]
    if pyfunc:
        lines.append("MLflow pyfunc: predict(rows of task, user_id, query) -> ranked doc_ids, source_user_ids, scores.")
        lines.append(f'Serve: mlflow models serve -m "models:/{name}@champion" --env-manager local.')
    lines.append("Weights: safetensors + JSON config (nothing unpickled).")
    return "\n".join(line for line in lines if line)


def version_description(
    name: str, tags: Mapping[str, str], data_version: str, curve: Sequence[float],
    epoch_metrics: Mapping[str, Sequence[float]] | None, pyfunc: bool,
) -> str:  # fmt: skip
    """A version's short description: what, which data, the key training figures (4 significant digits); the rest
    of the record is in the version's tags (``training.*``, ``dagster.*``) and on its run."""
    kind, task = tags.get("kind", name), tags.get("task", "")
    lines = [f"{kind} for {task}, data version {data_version}." if task else f"{kind}, data version {data_version}."]
    if tags.get("training.skipped"):  # never "trained": these weights are the initialisation
        lines.insert(0, "**Untrained**: registered at its initialisation, no training step ran. Why (the feedback "
                        f"probe): `{tags['training.skipped']}`.")  # fmt: skip
    if curve:
        lines.append(f"Training loss {sig(curve[0])} -> {sig(curve[-1])} over {len(curve)} steps.")
    best = tags.get("training.best_epoch")
    if "training.val_ndcg_init" in tags:
        by, improved = tags.get("training.selected_by", "kl"), tags.get("training.improved", "?")
        lines.append(f"Validation NDCG {sig_text(tags['training.val_ndcg_init'])} -> "
                     f"{sig_text(tags.get('training.val_ndcg_best', ''))} (best epoch {best}, selected by {by}, "
                     f"improved: {improved}).")  # fmt: skip
    elif epoch_metrics and any(v == v for v in epoch_metrics.get("val_ndcg", [])):
        finite = [float(v) for v in epoch_metrics["val_ndcg"] if v == v]
        lines.append(f"Validation NDCG {sig(finite[0])} -> {sig(finite[-1])}.")
    if tags.get("training.gate"):
        # a code span: the MLflow UI renders descriptions as Markdown, and "[low, high] (n=3)" reads as a link there
        lines.append(f"Gate: `{tags['training.gate']}`.")
    if pyfunc:
        lines.append("pyfunc model: predict(task, user_id, query) -> ranked documents with scores.")
    if tags.get("dagster.run_url"):  # Markdown: the MLflow UI shows a link back to the run that trained it
        lines.append(dagster_run_line(tags))
    lines.append("Everything else: the version's tags and its run.")
    return "\n".join(lines)


def dagster_run_line(tags: Mapping[str, str]) -> str:
    """The Markdown line linking a run's or version's description to the Dagster run that wrote it ("" = none)."""
    if not tags.get("dagster.run_url"):
        return ""
    return f"Dagster run: [{tags.get('dagster.run_id', '')[:8] or 'open'}]({tags['dagster.run_url']})."


def sig_text(value: str) -> str:
    """A number stored as text, to 4 significant digits (other text unchanged)."""
    try:
        return sig(float(value))
    except ValueError:
        return value
