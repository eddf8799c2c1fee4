"""Code versions follow what changes an asset's rows (its stage source, its settings sections), not the clock."""

import prag_assets.assets.users as users_assets
from prag_assets.code_versions import GROUP_SECTIONS, code_version, settings_sections, stage_modules
from prag_assets.demo_job import DEMO_SELECTION, PRAG_DEMO_JOB, demo_run_tags
from prag_models.config.settings import load_settings


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
