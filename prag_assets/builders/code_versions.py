"""Code versions derived from what changes an asset's rows, so that Dagster marks an asset stale after such a change.

An asset's version hashes the source of the prag_assets module that defines it, the source of the prag_models stage
modules that module calls (storage and config plumbing excluded) and the settings sections its group reads. A
change to a helper that a stage module imports in turn is not seen: bump the stage module (or its settings) then.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

import dagster as dg

#: The settings sections that change the rows of each group's assets (data.tasks only chooses partitions). Never
#: mlflow, compute or run: where models are registered and work runs, and how much time it may take (a budget's cut
#: is run configuration, not a new code version; run.llm_budget_s still reaches a run as data.llm_eval_samples,
#: prag_assets/cli/budget.py). tests/test_code_versions.py holds the same table as a spec.
GROUP_SECTIONS: dict[str, tuple[str, ...]] = {
    "lamp_data": ("data", "privacy"),  # consent defaults (user_sharing)
    "embeddings": ("embedder",),
    # z_u and taste from shareable documents only (privacy.default_share); taste embeds LaMP-1/4/5 titles (embedder)
    "users": ("clustering", "privacy", "embedder"),
    "history": ("clustering", "embedder", "privacy", "data"),  # data.undated: how drop-folder records are dated
    # tuned_settings and the tuned rows (tuning; without labels its trials are scored by the LLM utility: generator,
    # prompt); PBR's P-PRF: the generator writes expansions, the embedder embeds them, on the data.llm_eval_samples
    # samples; item_cf's rows and search (item_cf)
    "retrieval": ("retrieval", "clustering", "pbr", "privacy", "tuning", "embedder", "generator", "data", "prompt",
                  "item_cf"),
    # CFRAG's tuned knobs (tuning), its histories (privacy), its similar users (clustering: taste), the feedback
    # labels' prompts (generator, prompt)
    "cfrag": ("cfrag", "retrieval", "generator", "prompt", "clustering", "privacy", "tuning", "embedder"),
    "generation": ("generator", "prompt", "retrieval", "data"),  # data.llm_eval_samples: which samples
    # llm_utility: the generator's log-likelihoods of the LaMP prompts (prompt), its plan (utility); the verdict's
    # thresholds (data.verdict_*)
    "evaluation": ("retrieval", "generator", "prompt", "utility", "data"),
    "retrieval_eval": ("pbr", "embedder", "retrieval", "tuning", "generator", "data"),  # PBR's tuning, real_data_dir
    "user_shards": ("embedder", "generator", "pbr", "cfrag", "prompt", "privacy", "retrieval"),
}

#: Settings read by the named groups alone, left out of every other group's version: where the real PersonaBench /
#: LongMemEval samples live (scripts/ui.sh sets it where ../shared/data exists, a bare `prag materialize` does not;
#: the LaMP assets must not be "Unsynced" by it, issue 50.2).
ONLY_FOR: dict[tuple[str, str], tuple[str, ...]] = {("data", "real_data_dir"): ("retrieval_eval",)}

#: prag_models packages whose changes do not change what a stage computes (where and how rows are stored).
PLUMBING = ("prag_models.storage", "prag_models.config")

#: Who answers for the assets (Dagster owners: shown and filterable in the catalog).
OWNERS = ["team:prag"]


def stage_modules(module: ModuleType) -> list[ModuleType]:
    """The prag_models modules an asset module calls: imported modules and the modules of imported functions."""
    found: dict[str, ModuleType] = {}
    for value in vars(module).values():
        name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        if not isinstance(name, str) or not name.startswith("prag_models.") or name.startswith(PLUMBING):
            continue
        if name in sys.modules:
            found[name] = sys.modules[name]
    return [found[n] for n in sorted(found)]


def settings_sections(settings: Any, sections: Iterable[str], group: str | None = None) -> dict[str, Any]:
    """The named settings sections as plain data (data.tasks left out: it chooses partitions, not rows); given the
    group, without the settings ONLY_FOR other groups."""
    out = {}
    for name in sections:
        values = getattr(settings, name).model_dump(mode="json")
        if name == "data":
            values.pop("tasks", None)
        for (section, field), groups in ONLY_FOR.items():
            if section == name and group is not None and group not in groups:
                values.pop(field, None)
        out[name] = values
    return out


def code_version(module: ModuleType, sections: dict[str, Any]) -> str:
    """A short hash of an asset module's source, its stage modules' sources and its settings sections."""
    digest = hashlib.sha256()
    for part in [module, *stage_modules(module)]:
        digest.update(part.__name__.encode() + b"\0" + inspect.getsource(part).encode() + b"\0")
    digest.update(json.dumps(sections, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:12]


def defining_module(name: str, modules: Sequence[ModuleType]) -> ModuleType | None:
    """The module that defines the asset of this name (a function of that name or an assignment to it)."""
    pattern = re.compile(rf"^(?:def {name}\(|{name} = )", re.M)
    return next((m for m in modules if pattern.search(inspect.getsource(m))), None)


def versioned(assets: Sequence[Any], modules: Sequence[ModuleType], settings: Any) -> list[Any]:
    """The assets with derived code versions and the owners (assets of no listed module keep their version)."""
    out = []
    for asset in assets:
        if not isinstance(asset, dg.AssetsDefinition):
            out.append(asset)
            continue
        versions = {}
        for key in asset.keys:
            module = defining_module(key.path[-1], modules)
            group = asset.specs_by_key[key].group_name or ""
            if module is not None:
                sections = GROUP_SECTIONS.get(group, ())
                unreadable = {"settings": "unreadable"}
                read = settings_sections(settings, sections, group) if settings is not None else unreadable
                versions[key] = code_version(module, read)

        def _spec(spec: dg.AssetSpec, versions: dict = versions) -> dg.AssetSpec:
            return spec.replace_attributes(code_version=versions.get(spec.key, spec.code_version), owners=OWNERS)

        out.extend(dg.map_asset_specs(_spec, [asset]))
    return out
