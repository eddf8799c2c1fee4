"""How statistics become Dagster metadata (numbers stay numbers, nesting becomes keys or tables) and the report's
compact method x task table (oracle_community as the reference, never the best)."""

import dagster as dg
import pandas as pd

from prag_assets.metadata import keyed_table, stats_metadata
from prag_models.evaluation.report import evaluation_markdown, primary_by_task


def test_statistics_become_plottable_entries_not_json() -> None:
    """Scalars keep their type, a dict becomes key/sub entries, a list of scalars text, records a table."""
    meta = stats_metadata({"rows": 3, "share": 0.123456, "ok": True, "none": None, "models": {"retriever": "r/1"},
                           "methods": ["a", "b"], "rows_by": [{"k": "x", "n": 1}]})  # fmt: skip
    assert meta["rows"] == dg.MetadataValue.int(3) and meta["share"].value == 0.1235 and meta["ok"].value is True
    assert meta["models/retriever"].value == "r/1" and meta["methods"].value == "a, b"
    assert isinstance(meta["rows_by"], dg.TableMetadataValue)
    assert not any(isinstance(v, dg.JsonMetadataValue) for v in meta.values())


def test_keyed_statistics_become_one_table_row_each() -> None:
    """A dict of statistics per dataset is a table with the dataset as its first column, nested keys flattened."""
    table = keyed_table({"lme": {"n": 2, "by": {"x": 1}}, "pb": {"n": 3, "by": {"x": 4}}}, "dataset").value
    assert [c.name for c in table.schema.columns] == ["dataset", "n", "by/x"]
    assert [r.data["dataset"] for r in table.records] == ["lme", "pb"]


def _evaluation() -> pd.DataFrame:
    rows = [("LaMP-2", m, "accuracy", v, v - 0.1, v + 0.1, 4, True)
            for m, v in [("oracle_community", 0.9), ("dense_global", 0.4), ("cfrag", 0.5)]]  # fmt: skip
    rows.append(("LaMP-2", "cfrag", "f1", 0.2, 0.1, 0.3, 4, False))
    return pd.DataFrame(rows, columns=["task", "method", "metric", "value", "ci_low", "ci_high", "n_samples",
                                       "is_primary"])  # fmt: skip


def test_compact_table_one_row_per_method_primary_metric_with_interval_reference_last() -> None:
    """Methods as rows with their role, the task's primary metric as `value ± half-width`, the reference last."""
    wide = primary_by_task(_evaluation())
    assert list(wide.columns) == ["method", "role", "LaMP-2 accuracy (n=4)"]
    assert wide["method"].tolist() == ["cfrag", "dense_global", "oracle_community"]
    assert wide["role"].tolist() == ["personalized", "baseline", "reference"]
    assert wide.iloc[0, 2] == "0.500 ± 0.100"


def test_the_reference_is_never_bold_as_the_best() -> None:
    """In the markdown report the best non-reference method is bold, not the oracle that sees the truth."""
    markdown = evaluation_markdown(_evaluation())
    assert "**0.500 ± 0.100**" in markdown and "**0.900" not in markdown
