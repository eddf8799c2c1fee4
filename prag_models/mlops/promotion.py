"""Champion/challenger promotion of a task's CFRAG model bundle: evaluation tags, a metric gate, override, rollback.

The bundle of a task is its four registered models (``registry.MODEL_NAMES``: user encoder, retriever, reranker,
reranker without e_u). Evaluation results are attached to every version of the evaluated bundle as model-version tags
labelled as the bundle's (``eval.bundle.<metric>`` to 4 significant digits, ``eval.bundle.n_samples``,
``eval.bundle.note``; ``eval.data_version``, ``eval.bundle`` = the bundle's versions, ``eval.recorded_at``) and logged
as metrics ``eval.bundle.<metric>`` on each version's run. :func:`promote` compares the task's primary metric
(``metrics.primary_metric``; lower is better for MAE) of the ``challenger`` bundle with the value recorded for the
``champion`` bundle and, when the challenger is strictly better (or on override), moves alias ``champion`` of every
kind to its challenger version. Promotion and rollback share one gate besides the metric: a version flagged
``privacy.needs_retraining`` after an erasure, or tagged ``training.improved = false``, becomes champion only by an
explicit override, recorded with who and why (``promotion.*`` tags, ``model_promotions``). The previous champion
versions are pushed on a registered-model tag (``promotion.champion_history``), so :func:`rollback` can restore them.
Wherever the champion alias moves, ``mlops.champion.mark_champion`` says whether it now holds trained weights or the
untrained initialisation (the ``champion`` tag) and how it got there (``champion.status``).
Every decision, refusals included, is written as ``promotion.*`` tags on the versions it concerns and returned as a
:class:`PromotionDecision`; the Dagster job and the CLI append its rows to the DuckDB table ``model_promotions``
(:func:`append_decision`).

A flagged champion is never kept: a retrained, unflagged challenger replaces it whatever the metric (even one whose
training did not beat its initialisation, said in the message and ``champion.status``); while there is none, the
decision and ``champion.status`` say it is not served (``mlops.flagged``: the pyfunc and `prag answer` refuse flagged
versions).

mlflow is imported lazily (through ``registry.make_client``); importing this module is cheap.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prag_models.metrics.lamp import HIGHER_IS_BETTER, primary_metric
from prag_models.mlops.champion import mark_champion
from prag_models.mlops.decisions import PROMOTIONS_DDL as PROMOTIONS_DDL
from prag_models.mlops.decisions import PROMOTIONS_TABLE as PROMOTIONS_TABLE
from prag_models.mlops.decisions import PromotionDecision, describe_version
from prag_models.mlops.decisions import append_decision as append_decision
from prag_models.mlops.decisions import decision_metadata as decision_metadata
from prag_models.mlops.decisions import iso_utc as _iso
from prag_models.mlops.gate import PairedEvidence, Verdict
from prag_models.mlops.gate import decide_promotion as decide_promotion
from prag_models.mlops.registry import (
    CHALLENGER,
    CHAMPION,
    MODEL_NAMES,
    MlflowTarget,
    make_client,
    registered_name,
)
from prag_models.privacy.forget import flagged_versions as _flagged

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from prag_models.config.settings import Settings

#: Model kinds of a task's CFRAG bundle, in a fixed order.
KINDS: tuple[str, ...] = tuple(MODEL_NAMES)
HISTORY_TAG = "promotion.champion_history"
PROMOTED, REFUSED, ROLLED_BACK = "promoted", "refused", "rolled_back"
_MAX_TAG = 5000  # MLflow's limit on a tag value
_MAX_HISTORY = 50


def mlflow_target(settings: Settings) -> MlflowTarget:
    """The MLflow target of the settings (as the Dagster MlflowResource builds it)."""
    artifacts = "" if settings.mlflow.tracking_uri else str(settings.mlflow_artifacts_path)
    return MlflowTarget(settings.mlflow_uri, settings.mlflow.experiment, artifacts)


def bundle_key(versions: Mapping[str, int | None]) -> str:
    """The canonical text of a bundle's versions, e.g. ``reranker:2,reranker_no_eu:2,retriever:2,user_encoder:1``."""
    return ",".join(f"{k}:{versions[k]}" for k in sorted(versions))


#: Prefix of a bundle's evaluation figures on each of its versions (tags and run metrics): they score the bundle,
#: stamped alike on its models, never one model alone.
BUNDLE_EVAL = "eval.bundle"
BUNDLE_NOTE = ("figures of the whole CFRAG bundle (its {n} models together: tag eval.bundle) on the evaluation "
               "samples (eval.bundle.n_samples), not of this model alone")


def bundle_figure(value: float) -> str:
    """A bundle's evaluation figure as tagged: 4 significant digits."""
    return f"{float(value):.4g}"


def _now() -> datetime:
    """Now in UTC, naive (DuckDB TIMESTAMP)."""
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def _fmt(value: float | None) -> str:
    """A metric value for messages."""
    return "none" if value is None else f"{value:.6g}"


def record_evaluation(
    target: MlflowTarget,
    task: str,
    versions: Mapping[str, int],
    metrics: Mapping[str, float],
    data_version: str,
    extra_tags: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Attach a bundle's evaluation to each of its model versions (tags + run metrics); returns kind -> name/version."""
    from mlflow.entities import Metric

    if not metrics:
        raise ValueError(f"{task}: no metrics to record")
    client = make_client(target)
    now = _now()
    stamp = int(now.replace(tzinfo=UTC).timestamp() * 1000)
    tags = {f"{BUNDLE_EVAL}.{m}": bundle_figure(v) for m, v in metrics.items()}
    tags |= {"eval.data_version": data_version, "eval.bundle": bundle_key(versions), "eval.recorded_at": _iso(now),
             f"{BUNDLE_EVAL}.note": BUNDLE_NOTE.format(n=len(versions))}  # fmt: skip
    tags |= dict(extra_tags or {})
    out = {}
    for kind, version in versions.items():
        name = registered_name(kind, task)
        mv = client.get_model_version(name, str(version))
        for key, value in tags.items():
            client.set_model_version_tag(name, str(version), key, str(value)[:_MAX_TAG])
        if mv.run_id:
            step = len(client.get_metric_history(mv.run_id, f"{BUNDLE_EVAL}.{next(iter(metrics))}"))
            batch = [Metric(f"{BUNDLE_EVAL}.{m}", float(v), stamp, step) for m, v in metrics.items()]
            client.log_batch(mv.run_id, metrics=batch)
        out[kind] = f"{name}/{version}"
    return out


def _aliases(client: MlflowClient, name: str, task: str) -> dict[str, int]:
    """Alias -> version of a registered model (LookupError naming it when it is not registered)."""
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(name)
    except MlflowException:
        raise LookupError(f"registered model {name} does not exist: train the CFRAG models of {task} first") from None
    return {alias: int(v) for alias, v in model.aliases.items()}


#: Version tag written at training time: "false" when the kept model is not better than its initialisation.
IMPROVED_TAG = "training.improved"
ERASED = "trained on data of an erased user"
NOT_LEARNED = "training did not beat its untrained initialisation on its validation samples"
NOT_SERVED = "not served (the served model and `prag answer` refuse flagged versions)"


def _not_improved(client: MlflowClient, names: Mapping[str, str], versions: Mapping[str, int | None]) -> str:
    """Which versions of a bundle were trained without beating their initialisation on validation ("" = none)."""
    bad = []
    for kind, name in names.items():
        if versions.get(kind) is None:
            continue
        tags = client.get_model_version(name, str(versions[kind])).tags
        if tags.get(IMPROVED_TAG) == "false":
            by = tags.get("training.selected_by", "kl")
            metric = "val relevance NDCG" if by == "relevance" else "val KL"
            key = "val_relevance" if by == "relevance" else "val_kl"
            gate = f"; {tags['training.gate']}" if tags.get("training.gate") else ""
            bad.append(f"{name} v{versions[kind]} ({metric} {tags.get(f'training.{key}_best')} vs initial "
                       f"{tags.get(f'training.{key}_init')}{gate})")  # fmt: skip
    return ", ".join(bad)


def _bundle_value(
    client: MlflowClient, names: Mapping[str, str], versions: Mapping[str, int | None], metric: str
) -> tuple[float | None, str]:
    """(metric, data version) recorded for exactly this bundle on any of its versions; (None, "") when none."""
    if any(v is None for v in versions.values()):
        return None, ""
    key = bundle_key(versions)
    for kind, name in names.items():
        tags = client.get_model_version(name, str(versions[kind])).tags
        if tags.get("eval.bundle") == key and f"{BUNDLE_EVAL}.{metric}" in tags:
            return float(tags[f"{BUNDLE_EVAL}.{metric}"]), tags.get("eval.data_version", "")
    return None, ""


def _tag_versions(client: MlflowClient, decision: PromotionDecision, which: tuple[str, ...],
                  extra: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """Write the decision as ``promotion.*`` tags on the bundle's from and/or to versions, and as the last paragraph
    of their descriptions (``decisions.describe_version``)."""
    for kind, name in decision.names.items():
        tags = {
            "promotion.action": decision.action,
            "promotion.actor": decision.actor,
            "promotion.decided_at": _iso(decision.decided_at),
            "promotion.reason": decision.reason,
            "promotion.metric": decision.metric,
            "promotion.challenger_value": _fmt(decision.challenger_value),
            "promotion.champion_value": _fmt(decision.champion_value),
            "promotion.override": str(decision.override).lower(),
            "promotion.from_version": str(decision.from_versions.get(kind)),
            "promotion.to_version": str(decision.to_versions.get(kind)),
            "promotion.message": decision.message,
            **(extra or {}),
        }
        targets = {getattr(decision, f"{w}_versions").get(kind) for w in which} - {None}
        for version in sorted(targets):
            for key, value in tags.items():
                client.set_model_version_tag(name, str(version), key, value[:_MAX_TAG])
            described = client.get_model_version(name, str(version)).description or ""
            text = describe_version(described, decision, version == decision.to_versions.get(kind))
            client.update_model_version(name, str(version), description=text)


def _history(client: MlflowClient, name: str) -> list[int | None]:
    """The stack of previous champion versions of a registered model (most recent last)."""
    raw = client.get_registered_model(name).tags.get(HISTORY_TAG, "[]")
    return list(json.loads(raw))


#: Where a promotion's paired evidence comes from: the legs themselves, or a reader given the challenger and champion
#: bundle keys (``bundle_key``); the CLI and the Dagster job read table cfrag_promotion_evidence
#: (``prag_models/stages/promotion_evidence.py``).
EvidenceSource = Sequence[PairedEvidence] | Callable[[str, str], Sequence[PairedEvidence]] | None


def _evidence(source: EvidenceSource, challenger: Mapping[str, int | None], champion: Mapping[str, int | None]):
    """The paired evidence of exactly this challenger and champion bundle (empty without a source or a champion)."""
    if source is None or any(v is None for v in champion.values()):
        return []
    return list(source(bundle_key(challenger), bundle_key(champion)) if callable(source) else source)


def _legs_text(verdict: Verdict) -> str:
    """The evidence lines of a verdict (each leg's figures, interval and n)."""
    return "; ".join(leg.text() for leg in verdict.legs)


def promote(target: MlflowTarget, task: str, actor: str, reason: str, override: bool = False,
            evidence: EvidenceSource = None) -> PromotionDecision:  # fmt: skip
    """Gate the challenger bundle on the paired interval of challenger − champion over the same samples
    (``gate.decide_promotion``) and, if it passes, make it champion; refusals are recorded with their figures."""
    client = make_client(target)
    metric = primary_metric(task)
    higher = HIGHER_IS_BETTER[metric]
    names = {kind: registered_name(kind, task) for kind in KINDS}
    champion: dict[str, int | None] = {}
    challenger: dict[str, int | None] = {}
    for kind, name in names.items():
        aliases = _aliases(client, name, task)
        if CHALLENGER not in aliases:
            raise LookupError(f"{name} has no '{CHALLENGER}' version: train the CFRAG models of {task} first")
        challenger[kind], champion[kind] = aliases[CHALLENGER], aliases.get(CHAMPION)
    # Only versions the promotion would change are gated: an unchanged version is champion already.
    changed = {k: v for k, v in challenger.items() if v != champion[k]}
    not_learned = _not_improved(client, names, changed)
    chal_value, chal_data = _bundle_value(client, names, challenger, metric)
    champ_value, champ_data = _bundle_value(client, names, champion, metric)
    erased, kept = _flagged(client, names, challenger), _flagged(client, names, champion)  # docs/privacy.md
    how = "passed the gate"
    # the paired evidence is weighed whatever rule decides, so that every decision records its figures
    legs = _evidence(evidence, challenger, champion)
    gate = decide_promotion(task, legs, override) if changed else Verdict(False, "")
    shown = f"; evidence: {_legs_text(gate)}" if gate.legs else ""
    if challenger == champion:
        verdict = Verdict(False, f"{task}: nothing to promote, the challenger versions are already champion "
                                 f"({bundle_key(challenger)})")  # fmt: skip
    elif erased and not override:
        verdict = Verdict(False, f"{task}: refused: {erased} {ERASED}; retrain first (or override, audited){shown}",
                          gate.legs)  # fmt: skip
    elif erased:
        verdict = Verdict(True, f"{task}: promoted by override although {erased} {ERASED} ({NOT_SERVED}){shown}",
                          gate.legs)  # fmt: skip
    elif kept:  # a flagged champion is never kept: a retrained challenger replaces it, learned or not (said so)
        verdict = Verdict(True, f"{task}: the champion {kept} was trained on data of an erased user and cannot be "
                                "kept; the retrained challenger replaces it" + (
                                    f" although {not_learned} ({NOT_LEARNED})" if not_learned else "") + shown,
                          gate.legs)  # fmt: skip
        how = "replaces a flagged champion" + (", although its training did not beat its initialisation"
                                               if not_learned else "")  # fmt: skip
    elif not_learned and not override:
        verdict = Verdict(False, f"{task}: refused: {not_learned} ({NOT_LEARNED}); override to promote anyway{shown}",
                          gate.legs)  # fmt: skip
    else:
        verdict = gate
    message = verdict.message
    if kept and not verdict.promote:  # the flagged champion stays only as a name: nothing serves it
        message += (f"; the champion {kept} {ERASED}: {NOT_SERVED} until a retrained challenger passes the gate "
                    f"(retrain: `prag materialize`, then `prag promote --task {task}`)")  # fmt: skip
    if verdict.promote and chal_data and champ_data and chal_data != champ_data:
        message += f" (note: evaluated on different data: champion {champ_data}, challenger {chal_data})"
    leg = verdict.primary
    if leg is not None:  # the figures the gate decided on replace the recorded bundle metrics
        metric, higher = f"{leg.name} {leg.metric}", leg.higher_is_better
        chal_value, champ_value = leg.challenger_value, leg.champion_value
    decision = PromotionDecision(
        task, PROMOTED if verdict.promote else REFUSED, verdict.promote, metric, higher, chal_value, champ_value,
        override, actor, reason, _now(), message, names, dict(champion), dict(challenger),
        *(() if leg is None else (leg.difference.value, leg.difference.low, leg.difference.high, leg.difference.n)),
    )  # fmt: skip
    if verdict.promote:
        for kind, name in names.items():
            stack = [*_history(client, name), champion[kind]][-_MAX_HISTORY:]
            client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(stack))
            client.set_registered_model_alias(name, CHAMPION, str(challenger[kind]))
            how = "by override" if "by override" in message else how
            mark_champion(client, name, challenger[kind], f"v{challenger[kind]}: promoted, {how}")
    elif kept:
        for kind, name in names.items():
            if champion[kind] is not None:
                mark_champion(client, name, champion[kind], f"v{champion[kind]}: flagged for retraining after an "
                              f"erasure, {NOT_SERVED}")  # fmt: skip
    _tag_versions(client, decision, ("to", "from") if leg is not None else ("to",), verdict.tags())
    return decision


def rollback(target: MlflowTarget, task: str, actor: str, reason: str, override: bool = False) -> PromotionDecision:
    """Give alias ``champion`` back to the versions that held it before the last promotion (LookupError if none).

    The promotion gate applies: versions flagged for retraining after an erasure, or whose training did not beat its
    initialisation, are restored only with ``override`` (recorded with the actor and reason); otherwise refused."""
    client = make_client(target)
    metric = primary_metric(task)
    names = {kind: registered_name(kind, task) for kind in KINDS}
    current: dict[str, int | None] = {}
    stacks: dict[str, list[int | None]] = {}
    for kind, name in names.items():
        current[kind] = _aliases(client, name, task).get(CHAMPION)
        stacks[kind] = _history(client, name)
    empty = [names[k] for k, s in stacks.items() if not s]
    if empty:
        raise LookupError(
            f"{task}: no previous champion recorded for {', '.join(empty)}: nothing to roll back to "
            "(rollback undoes a promotion made with `prag promote` or the promote_cfrag_models job)"
        )
    restored = {kind: stacks[kind][-1] for kind in names}
    to_value, _ = _bundle_value(client, names, restored, metric)
    from_value, _ = _bundle_value(client, names, current, metric)
    moves = ", ".join(f"{k} v{current[k]} -> v{restored[k]}" for k in names)
    changed = {k: v for k, v in restored.items() if v != current[k]}
    problems = [f"{bad} {ERASED}" for bad in [_flagged(client, names, changed)] if bad]
    problems += [f"{bad} ({NOT_LEARNED})" for bad in [_not_improved(client, names, changed)] if bad]
    if problems and not override:
        message = f"{task}: rollback refused: {'; '.join(problems)}; override to restore anyway (audited)"
        decision = PromotionDecision(
            task, REFUSED, False, metric, HIGHER_IS_BETTER[metric], to_value, from_value, False, actor, reason, _now(),
            message, names, current, restored,
        )  # fmt: skip
        _tag_versions(client, decision, ("to",))
        return decision
    message = f"{task}: champion rolled back to the versions before the last promotion ({moves})"
    if problems:
        message += f"; by override although {'; '.join(problems)}"
        message += f" ({NOT_SERVED})" if any(ERASED in p for p in problems) else ""
    decision = PromotionDecision(
        task, ROLLED_BACK, False, metric, HIGHER_IS_BETTER[metric], to_value, from_value, bool(problems) and override,
        actor, reason, _now(), message, names, current, restored,
    )  # fmt: skip
    for kind, name in names.items():
        client.set_registered_model_tag(name, HISTORY_TAG, json.dumps(stacks[kind][:-1]))
        if restored[kind] is None:
            client.delete_registered_model_alias(name, CHAMPION)
            mark_champion(client, name, None, "none: rolled back to no champion")
        else:
            client.set_registered_model_alias(name, CHAMPION, str(restored[kind]))
            how = "by override of the gate" if problems else "the gate passed"
            mark_champion(client, name, restored[kind], f"v{restored[kind]}: rolled back, {how}")
    _tag_versions(client, decision, ("from", "to"))
    return decision
