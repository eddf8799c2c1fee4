"""Data validation with Great Expectations 1.x suites (imported lazily) and numeric checks GX has no expectation for."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Expect:
    """One expectation: a GX class name and its keyword arguments."""

    kind: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def not_null(*columns: str) -> list[Expect]:
    """Each column has no nulls."""
    return [Expect("ExpectColumnValuesToNotBeNull", {"column": c}) for c in columns]


def unique(*columns: str) -> Expect:
    """The columns together identify a row."""
    if len(columns) == 1:
        return Expect("ExpectColumnValuesToBeUnique", {"column": columns[0]})
    return Expect("ExpectCompoundColumnsToBeUnique", {"column_list": list(columns)})


def between(column: str, low: float | None, high: float | None) -> Expect:
    """Values lie in [low, high]."""
    return Expect("ExpectColumnValuesToBeBetween", {"column": column, "min_value": low, "max_value": high})


def in_set(column: str, values: Sequence[Any]) -> Expect:
    """Values come from a fixed set."""
    return Expect("ExpectColumnValuesToBeInSet", {"column": column, "value_set": list(values)})


def has_columns(*columns: str) -> list[Expect]:
    """The table has these columns."""
    return [Expect("ExpectColumnToExist", {"column": c}) for c in columns]


def min_rows(n: int) -> Expect:
    """The table has at least n rows."""
    return Expect("ExpectTableRowCountToBeBetween", {"min_value": n})


@lru_cache(maxsize=1)
def _context() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


#: A process-wide counter for the names of each validation's datasource, suite and definition.
_VALIDATIONS = itertools.count()


def validate_frame(name: str, df: pd.DataFrame, expectations: Sequence[Expect]) -> tuple[bool, list[str]]:
    """Run a GX suite over a DataFrame; returns success and one line per failed expectation."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    context = _context()
    suffix = f"{name}_{next(_VALIDATIONS)}"
    datasource = context.data_sources.add_pandas(f"ds_{suffix}")
    asset = datasource.add_dataframe_asset(f"asset_{suffix}")
    batch_def = asset.add_batch_definition_whole_dataframe(f"batch_{suffix}")
    suite = context.suites.add(gx.ExpectationSuite(name=f"suite_{suffix}"))
    try:
        for e in expectations:
            suite.add_expectation(getattr(gxe, e.kind)(**e.kwargs))
        validation = context.validation_definitions.add(
            gx.ValidationDefinition(data=batch_def, suite=suite, name=f"val_{suffix}")
        )
        result = validation.run(batch_parameters={"dataframe": df}, result_format="SUMMARY")
    finally:
        # the context lives as long as the process (a code server, a test worker): what each validation adds to it is
        # removed, else every later validation pays for the ones before it (listing and copying them) and memory grows
        _forget(context, suffix)
    failures = []
    for r in result.results:
        if not r.success:
            cfg = r.expectation_config
            details = {
                k: v
                for k, v in (r.result or {}).items()
                if k in ("unexpected_count", "partial_unexpected_list", "observed_value")
            }
            failures.append(f"{cfg.type} {dict(cfg.kwargs)} failed: {details}")
    return bool(result.success), failures


def _forget(context: Any, suffix: str) -> None:
    """Remove one validation's definition, suite and datasource from the context (those that were added)."""
    for store, name in ((context.validation_definitions, f"val_{suffix}"), (context.suites, f"suite_{suffix}"),
                        (context.data_sources, f"ds_{suffix}")):  # fmt: skip
        with contextlib.suppress(Exception):  # not added (an earlier step failed): nothing to remove
            store.delete(name)


def matrix_problems(matrix: np.ndarray, dim: int | None = None, unit_norm: bool = False) -> list[str]:
    """Problems of an embedding matrix: wrong dimension, non-finite values, rows not of unit length."""
    problems = []
    if matrix.ndim != 2:
        return [f"expected a 2-d matrix, got shape {matrix.shape}"]
    if dim is not None and matrix.shape[1] != dim:
        problems.append(f"dimension {matrix.shape[1]} != expected {dim}")
    bad = int((~np.isfinite(matrix)).any(axis=1).sum())
    if bad:
        problems.append(f"{bad} rows contain NaN or infinite values")
    if unit_norm and len(matrix):
        norms = np.linalg.norm(matrix, axis=1)
        off = int((np.abs(norms - 1.0) > 1e-3).sum())
        if off:
            problems.append(f"{off} rows are not unit length")
    return problems
