"""Fault injection for the reliability tests: make a chosen point of a run raise or exit, deterministically.

``PRAG_FAULT="<point>[@<target>]:<raise|exit>"`` (several separated by commas) arms the named points; unset,
``maybe_fail`` does nothing. ``@<target>`` narrows a point to one target (for ``table_write``, a table name).
``exit`` ends the process at once with ``os._exit(137)`` (what ``kill -9`` does to the step's process: no
``finally``, no rollback, no Dagster event); ``raise`` raises ``InjectedFault`` (an ordinary step failure).

Points (where ``maybe_fail`` is called):

- ``embedding_chunk``: after the first chunk of new embeddings is committed (prag_models/text/embedding_cache.py);
- ``table_write``: inside the transaction of ``store.replace_many``, after the first table's delete and before the
  commit (prag_models/storage/store.py);
- ``training_epoch``: after the first epoch of CFRAG retriever / reranker training (prag_models/methods/cfrag/fit.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping

ENV = "PRAG_FAULT"
POINTS = ("embedding_chunk", "table_write", "training_epoch")
MODES = ("raise", "exit")
EXIT_CODE = 137  # 128 + SIGKILL, as the shell reports a process killed with kill -9


class InjectedFault(RuntimeError):
    """The failure PRAG_FAULT asked for at a point."""


def armed(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None, str]]:
    """The armed (point, target or None, mode) triples of PRAG_FAULT; ValueError naming a malformed entry."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    out = []
    for entry in filter(None, (e.strip() for e in raw.split(","))):
        where, _, mode = entry.rpartition(":")
        point, _, target = where.partition("@")
        if point not in POINTS or mode not in MODES:
            known = f"point in {list(POINTS)}, mode in {list(MODES)}"
            raise ValueError(f"{ENV}: {entry!r} is not <point>[@<target>]:<mode> with {known}")
        out.append((point, target or None, mode))
    return out


def maybe_fail(point: str, targets: Iterable[str] = ()) -> None:
    """Raise or exit here when PRAG_FAULT arms this point (for one of ``targets``, if it names one); else nothing."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; known: {list(POINTS)}")
    if not os.environ.get(ENV):
        return
    names = set(targets)
    mode = next((m for p, t, m in armed() if p == point and (t is None or t in names)), None)
    if mode is None:
        return
    message = f"{ENV}: injected fault at {point}{f' {sorted(names)}' if names else ''} ({mode})"
    if mode == "raise":
        raise InjectedFault(message)
    print(message, file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
