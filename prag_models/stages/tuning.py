"""Stage 4a (tuning): ClusterRAG's knobs (docs/methods.md §3.9) and CFRAG's (§2.9) chosen per task on its train
samples, logged to MLflow; the retrieval stage and CFRAG's stages read them."""

from __future__ import annotations

from typing import Any

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.evaluation.tuning import TUNED_COLUMNS, GeneratorSource, read_tuned, retrieve, tune_task
from prag_models.methods.knobs import UserSpace, with_knobs
from prag_models.methods.profiles import ProfileIndex
from prag_models.mlops.registry import MlflowTarget
from prag_models.mlops.tuning_log import log_tuning


def tuned_settings_rows(
    con, task: str, settings: Settings, target: MlflowTarget | None = None, generator: GeneratorSource = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The tuned_settings rows of one task (none when tuning.enabled is false) and the search's statistics; the
    search is logged to MLflow when a target is given."""
    if not settings.tuning.enabled:
        return pd.DataFrame(columns=TUNED_COLUMNS), {"enabled": False}
    chosen, trials, stats = tune_task(con, task, settings, generator)
    stats.pop("sample_ids", None)
    if target is not None and len(chosen):
        stats["mlflow_run_id"] = log_tuning(target, task, chosen, trials)
    return chosen, stats


def cfrag_tuned_rows(
    con, task: str, settings: Settings, target: MlflowTarget | None = None, generator: GeneratorSource = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The cfrag_tuned_settings rows of one task (none when tuning.enabled is false) and the search's statistics;
    the search is logged to MLflow (run cfrag-tuning-<task>) when a target is given."""
    from prag_models.evaluation.tuning import tune_cfrag

    if not settings.tuning.enabled:
        return pd.DataFrame(columns=TUNED_COLUMNS), {"enabled": False}
    chosen, trials, stats = tune_cfrag(con, task, settings, generator)
    if target is not None and len(chosen):
        stats["mlflow_run_id"] = log_tuning(target, task, chosen, trials, "cfrag-tuning")
    return chosen, stats


def tuning_markdown(stats: dict[str, dict]) -> str:
    """Per task and method: the chosen knob values, the default's and the chosen train score, trials."""
    lines = ["| task | method | chosen | train score | default score | best trial − default [95 %] | metric | trials "
             "| clusters (ARI vs planted) |", "|---" * 9 + "|"]  # fmt: skip
    for task, entry in stats.items():
        for method, m in entry.get("methods", {}).items():
            chosen = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in m["chosen"].items())
            gain = "{:+.3f} [{:+.3f}, {:+.3f}]".format(*m["best_train_gain"])
            kept = " (default kept)" if m["kept_default"] else ""
            ari = m.get("cluster_ari_vs_planted")
            clusters = f"{m.get('clusters', '')}" + (f" ({ari:.2f})" if ari is not None else "")
            budget = " (time budget spent)" if m.get("stopped_by") == "time budget" else ""
            lines.append(f"| {task} | {method} | {chosen}{kept} | {m['score']:.3f} | {m['default_score']:.3f} | "
                         f"{gain} | {m['metric']} | {m['trials']}{budget} | {clusters} |")  # fmt: skip
    return "\n".join(lines)


def with_tuned_rows(
    con, task: str, settings: Settings, index: ProfileIndex, samples: pd.DataFrame, rows: list[tuple]
) -> tuple[list[tuple], dict[str, Any]]:
    """Retrieval rows (with the writers column) with each tuned method's untuned rows renamed ``<method>@default`` and
    its rows retrieved with the task's tuned values (tuned_settings) under the method's own name; unchanged without
    tuned values."""
    tuned = read_tuned(con, task) if settings.tuning.enabled else {}
    if not tuned:
        return rows, {}
    out = [(r[0], f"{r[1]}@default", *r[2:]) if r[1] in tuned else r for r in rows]
    space = UserSpace(con, task, settings, index.vectors.shape[1])
    for method, values in tuned.items():
        found = retrieve(method, with_knobs(settings, values), space, index, samples)
        out += [(task, method, s.sample_id, s.user_id, rank, r.doc_id, r.source_user_id, r.score, r.writers)
                for s, docs in zip(samples.itertuples(), found, strict=True)
                for rank, r in enumerate(docs, 1)]  # fmt: skip
    return out, {"tuned": tuned}


def tuned_check_rules(
    con, task: str, settings: Settings
) -> tuple[dict[str, set[str]] | None, int | None, dict[str, int] | None]:
    """What the tuned rows may retrieve from, for the retrieval check: the tuned clusterrag_collaborative's
    neighbours per user, the tuned clusterrag_community's pool size and its user clusters (a tuned minimum cluster
    size re-clusters); None where the method is not tuned."""
    tuned = read_tuned(con, task) if settings.tuning.enabled else {}
    neighbours, top_n, groups = None, None, None
    space = UserSpace(con, task, settings) if tuned else None
    if "clusterrag_collaborative" in tuned:
        found = space.neighbours(with_knobs(settings, tuned["clusterrag_collaborative"]))
        neighbours = {u: set(v) for u, v in found.items()}
    if "clusterrag_community" in tuned:
        chosen = with_knobs(settings, tuned["clusterrag_community"])
        top_n, groups = int(chosen.clustering.community_top_n), space.groups(chosen)
    return neighbours, top_n, groups
