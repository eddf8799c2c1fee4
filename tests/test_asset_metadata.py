"""What the Dagster UI shows of the asset layer: groups in data-flow order, code versions, row counts and schemas."""

import re

import dagster as dg
import duckdb
import pytest
from conftest import ROOT, materialize_graph

from prag_models.config.settings import load_settings

#: The groups in the order data flows, as the demo tutorial (docs/tutorial/demo.md) lists them.
GROUPS = ["lamp_data", "embeddings", "users", "history", "retrieval", "cfrag", "generation", "evaluation",
          "retrieval_eval"]  # fmt: skip


@pytest.fixture(scope="module")
def graph():
    """The resolved asset graph of the project's Definitions."""
    from prag_assets.definitions import defs

    return defs.resolve_asset_graph()


def test_groups_are_the_readmes_and_flow_in_order(graph) -> None:
    """The UI's groups are the tutorial's; no asset depends on an asset of a later group."""
    group_of = {k: graph.get(k).group_name for k in graph.get_all_asset_keys()}
    assert set(group_of.values()) == set(GROUPS)
    tutorial = (ROOT / "docs" / "tutorial" / "demo.md").read_text(encoding="utf-8")
    listed = re.search(r"the graph \(groups(.*?)\)", tutorial, re.S).group(1)
    assert re.findall(r"`(\w+)`", listed) == GROUPS
    for key, group in group_of.items():
        for parent in graph.get(key).parent_keys:
            assert GROUPS.index(group_of[parent]) <= GROUPS.index(group), f"{parent} ({group_of[parent]}) -> {key}"


def test_every_stage_asset_has_a_code_version(graph) -> None:
    """Dagster can tell code changes from data changes for every asset."""
    missing = {k.to_user_string() for k in graph.get_all_asset_keys() if graph.get(k).code_version is None}
    assert not missing, missing


def test_table_assets_report_row_count_and_schema(tiny_config) -> None:
    """dagster/row_count equals the rows of the run's tasks; dagster/column_schema names the table's columns."""
    tables = ["lamp_samples", "profile_documents", "document_embeddings", "user_embeddings", "user_clusters",
              "similar_users", "baseline_retrievals"]  # fmt: skip
    selection = ["query_embeddings", *tables]
    result = materialize_graph(tiny_config, ["LaMP-2", "LaMP-3"], selection=selection)
    assert result.success
    with duckdb.connect(str(load_settings(tiny_config).duckdb_path), read_only=True) as con:
        for table in tables:
            metadata = result.asset_materializations_for_node(table)[0].metadata
            rows = con.execute(f"SELECT count(*) FROM {table} WHERE task IN ('LaMP-2', 'LaMP-3')").fetchone()[0]
            assert metadata["dagster/row_count"].value == rows > 0
            columns = [c.name for c in metadata["dagster/column_schema"].value.columns]
            assert columns == [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
            assert isinstance(metadata.get("per_task", metadata.get("samples")), dg.JsonMetadataValue)
