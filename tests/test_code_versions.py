"""Code versions follow what changes an asset's rows (its stage source, its settings sections), not the clock."""

from functools import cache

import pytest

import prag_assets.assets.users as users_assets
from prag_assets.automation.demo_job import DEMO_SELECTION, PRAG_DEMO_JOB, demo_run_tags
from prag_assets.builders.code_versions import GROUP_SECTIONS, code_version, settings_sections, stage_modules, versioned
from prag_models.config.settings import Settings, load_settings

#: The spec: the settings sections each group's rows depend on (a change must make its assets stale), and no other
#: (mlflow, compute: where models are registered and work runs; run only where the utility reads its budget).
#: Why each: prag_assets/builders/code_versions.py GROUP_SECTIONS.
MUST_CHANGE: dict[str, set[str]] = {
    "lamp_data": {"data", "privacy"},
    "embeddings": {"embedder"},
    "users": {"clustering", "privacy", "embedder"},
    "history": {"clustering", "embedder", "privacy", "data"},
    "retrieval": {"retrieval", "clustering", "pbr", "privacy", "tuning", "embedder", "generator", "data", "prompt",
                  "item_cf"},
    "cfrag": {"cfrag", "retrieval", "generator", "prompt", "clustering", "privacy", "tuning", "embedder"},
    "generation": {"generator", "prompt", "retrieval", "data"},
    "evaluation": {"retrieval", "generator", "prompt", "utility", "data"},
    "retrieval_eval": {"pbr", "embedder", "retrieval", "tuning", "generator", "data"},
    "user_shards": {"embedder", "generator", "pbr", "cfrag", "prompt", "privacy", "retrieval"},
}
#: One change per settings section, of a value that changes results where the section is read.
CHANGES: dict[str, tuple[str, str]] = {
    "data": ("PRAG__DATA__LLM_EVAL_SAMPLES", "7"), "embedder": ("PRAG__EMBEDDER__MAX_SEQ_LENGTH", "128"),
    "generator": ("PRAG__GENERATOR__MAX_NEW_TOKENS", "3"), "prompt": ("PRAG__PROMPT__MAX_PROMPT_TOKENS", "256"),
    "retrieval": ("PRAG__RETRIEVAL__K", "5"), "clustering": ("PRAG__CLUSTERING__USER_SIMILARITY", "taste"),
    "tuning": ("PRAG__TUNING__MAX_TRIALS", "5"), "mlflow": ("PRAG__MLFLOW__EXPERIMENT", "other"),
    "cfrag": ("PRAG__CFRAG__HEADS", "4"), "pbr": ("PRAG__PBR__K1", "3"),
    "privacy": ("PRAG__PRIVACY__DEFAULT_SHARE", "false"), "compute": ("PRAG__COMPUTE__RAY_NUM_CPUS", "1"),
    "run": ("PRAG__RUN__LLM_BUDGET_S", "60"), "utility": ("PRAG__UTILITY__MIN_SAMPLES", "10"),
    "item_cf": ("PRAG__ITEM_CF__SHARPNESS", "0"),
}  # fmt: skip


def _version(**environ: str) -> str:
    settings = load_settings(environ={"PRAG_HOME": "/nonexistent", **environ})
    return code_version(users_assets, settings_sections(settings, GROUP_SECTIONS["users"]))


def test_version_changes_with_the_groups_settings_only() -> None:
    """A clustering setting changes the users group's version; a generator setting does not; data.tasks never."""
    base = _version()
    assert _version(PRAG__CLUSTERING__SIMILAR_USERS="7") != base
    assert _version(PRAG__GENERATOR__MAX_NEW_TOKENS="3") == base
    lamp = load_settings(environ={"PRAG_HOME": "/nonexistent", "PRAG__DATA__TASKS": "LaMP-2"})
    assert "tasks" not in settings_sections(lamp, ["data"])["data"]


def test_version_hashes_the_stage_module_the_asset_calls() -> None:
    """The users assets' version covers prag_models.stages.users (their logic), not the storage plumbing."""
    names = [m.__name__ for m in stage_modules(users_assets)]
    assert "prag_models.stages.users" in names and not any(n.startswith("prag_models.storage") for n in names)


def test_every_asset_has_a_derived_version_and_an_owner() -> None:
    """The Definitions replace the placeholder "1" with hashes; every asset has an owner."""
    from prag_assets.definitions import defs

    graph = defs.resolve_asset_graph()
    nodes = [graph.get(k) for k in graph.get_all_asset_keys()]
    assert all(n.code_version and n.code_version != "1" for n in nodes)
    assert all(n.owners for n in nodes)


def test_demo_job_runs_what_prag_materialize_runs_and_tags_the_configuration() -> None:
    """prag_demo: every asset but group retrieval_eval (prag materialize's --select), tagged with the configuration."""
    from prag_assets.definitions import defs

    job = defs.resolve_job_def(PRAG_DEMO_JOB)
    graph = defs.resolve_asset_graph()
    selected = DEMO_SELECTION.resolve(graph)
    groups = {graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert {graph.get(k).group_name for k in selected} == groups - {"retrieval_eval"}
    assert job.asset_layer.selected_asset_keys == selected
    settings = load_settings(environ={"PRAG_HOME": "/nonexistent", "PRAG__DATA__TASKS": "LaMP-2,LaMP-3"})
    tags = demo_run_tags(settings)
    assert tags["prag/tasks"] == "LaMP-2,LaMP-3" and tags["prag/data_source"] == "demo"
    other = demo_run_tags(load_settings(environ={"PRAG_HOME": "/nonexistent", "PRAG__RETRIEVAL__K": "3"}))
    assert other["prag/settings_hash"] != tags["prag/settings_hash"]


@cache
def _asset_versions(change: tuple[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """asset -> (group, code version) as the code locations derive them under default settings with one change."""
    import dagster as dg

    from prag_assets.assets import user_shards
    from prag_assets.definitions import ASSET_MODULES

    settings = load_settings(environ={"PRAG_HOME": "/nonexistent", **dict([change] if change else [])})
    out = {}
    for asset in versioned(dg.load_assets_from_modules(ASSET_MODULES), ASSET_MODULES, settings):
        for key, spec in asset.specs_by_key.items():
            out[key.to_user_string()] = (spec.group_name, spec.code_version)
    # prag_assets.automation.shard_definitions: one version for the group's assets
    out["user_shards"] = ("user_shards", code_version(user_shards, settings_sections(settings, GROUP_SECTIONS[
        "user_shards"])))  # fmt: skip
    return out


def test_the_spec_covers_every_group_and_every_settings_section() -> None:
    """A new group or settings section must be classified here (and in GROUP_SECTIONS) before it can go stale."""
    assert {group for group, _ in _asset_versions().values()} == set(MUST_CHANGE) == set(GROUP_SECTIONS)
    assert set(CHANGES) == set(Settings.model_fields) - {"home"}


@pytest.mark.parametrize("section", sorted(CHANGES))
def test_each_group_goes_stale_exactly_when_a_section_it_depends_on_changes(section: str) -> None:
    """Issue 39: tuning, and privacy for the users and cfrag groups, were left out. Every asset of a group changes its
    version when a section the group's rows depend on changes, and none changes for another section."""
    base, changed = _asset_versions(), _asset_versions(CHANGES[section])
    wrong = [f"{asset} ({group}): {'unchanged' if base[asset][1] == version else 'changed'}"
             for asset, (group, version) in changed.items()
             if (base[asset][1] != version) != (section in MUST_CHANGE[group])]  # fmt: skip
    assert wrong == [], f"a change of {section}: {wrong}"
