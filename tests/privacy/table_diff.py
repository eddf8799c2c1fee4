"""Comparing two worlds' rows of a table (tests/privacy/test_non_interference.py): in any row order, floats within
TOLERANCE, columns of one materialization's timings, run ids and paths (VOLATILE) dropped by the caller."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

#: Absolute and relative tolerance of every float compared (a whole-graph run here reproduces them exactly).
TOLERANCE = 1e-6
#: Columns of one materialization's timings, run ids and model folders.
VOLATILE = re.compile(r"(^|_)(run_id|at|seconds|path)$|^seconds_per_prompt$")


def missing(value) -> bool:
    """None, NaN or pandas' NA (a scalar only)."""
    return value is None or (np.ndim(value) == 0 and bool(pd.isna(value)))


def same(x, y) -> bool:
    """Equal values; floats (alone or in arrays) within TOLERANCE; missing equals missing."""
    if isinstance(x, bytes | bytearray | memoryview) or isinstance(y, bytes | bytearray | memoryview):
        return bytes(x) == bytes(y)
    if missing(x) or missing(y):
        return missing(x) and missing(y)
    if isinstance(x, list | tuple | np.ndarray) or isinstance(y, list | tuple | np.ndarray):
        u, v = np.asarray(x, dtype=object), np.asarray(y, dtype=object)
        return u.shape == v.shape and all(same(p, q) for p, q in zip(u.ravel(), v.ravel(), strict=True))
    if isinstance(x, float | np.floating) and isinstance(y, int | float | np.number):
        return bool(np.isclose(x, y, rtol=TOLERANCE, atol=TOLERANCE))
    return x == y


def _sort_key(value) -> str:
    """A row's sort key part: floats rounded (so two worlds order alike), everything else as text."""
    if missing(value):
        return ""
    if isinstance(value, float | np.floating):
        return f"{value:.4f}"
    if isinstance(value, list | np.ndarray):
        return str([_sort_key(v) for v in value])
    return str(value)


def _canonical(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows in a world-independent order: by every non-float column in the table's order (its identity columns
    come first), then the floats."""
    cols = sorted(frame.columns, key=lambda c: frame[c].dtype.kind == "f")  # stable: keeps the table's order
    keys = [tuple(_sort_key(r[c]) for c in cols) for _, r in frame.iterrows()]
    return frame.iloc[sorted(range(len(frame)), key=keys.__getitem__)].reset_index(drop=True)


def differences(table: str, a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """What differs between two frames of a table's rows, in any row order (one line per column that differs)."""
    if len(a) != len(b) or set(a.columns) != set(b.columns):
        return [f"{table}: {len(a)} rows of {sorted(a.columns)} vs {len(b)} of {sorted(b.columns)}"]
    a, b = _canonical(a), _canonical(b[list(a.columns)])
    out = []
    for col in a.columns:
        bad = [i for i, (x, y) in enumerate(zip(a[col], b[col], strict=True)) if not same(x, y)]
        if bad:
            out.append(f"{table}.{col}: {len(bad)} of {len(a)} rows differ, e.g. {str(a[col].iloc[bad[0]])[:80]!r} "
                       f"vs {str(b[col].iloc[bad[0]])[:80]!r}")  # fmt: skip
    return out


def keyed_differences(table: str, a: pd.DataFrame, b: pd.DataFrame, key: list[str]) -> tuple[list[str], set, set]:
    """The differences of the rows whose key both frames hold, and the keys only a or only b holds."""
    ka, kb = (set(map(tuple, f[key].astype(str).to_numpy())) for f in (a, b))
    both = ka & kb

    def shared(f: pd.DataFrame) -> pd.DataFrame:
        return f[[tuple(k) in both for k in f[key].astype(str).to_numpy()]]

    return differences(table, shared(a), shared(b)), ka - kb, kb - ka
