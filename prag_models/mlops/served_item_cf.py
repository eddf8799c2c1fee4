"""item_cf served (docs/methods.md §5.2): the task's tuned item_cf knobs and the users' vectors its votes are weighed
by, read as the retrieval stage reads them, for `prag answer --method item_cf` (``answer_once``) and the MLflow pyfunc
(``mlops.pyfunc``, request parameter ``method = "item_cf"``) alike.

item_cf has no trained model: every registered CFRAG version's pyfunc serves it from the same DuckDB file as its own
ranking, over the version's profile index (the privacy rules of ``mlops.serving.read_task_index``: a viewer sees its
own documents and the shareable documents of the others) and with the settings sections the version stored
(``SECTIONS``; a version logged before they were stored refuses item_cf rather than guess its knobs). Identical
documents are collapsed into one text with a writer count over the documents the asker may see
(``methods.item_cf``); the pyfunc returns the counts beside the ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prag_models.config.settings import Settings
from prag_models.methods.item_cf import METHOD, ItemCfRetriever
from prag_models.methods.profiles import ProfileIndex

#: The settings sections item_cf's knobs come from, which a version's model_config must hold for it to serve item_cf
#: (retrieval, embedder and privacy every version holds or fails closed on).
SECTIONS: tuple[str, ...] = ("item_cf", "tuning", "clustering")
#: The table of per-task tuned knobs (``evaluation.tuning``).
TUNED_TABLE = "tuned_settings"


def item_cf_inputs(con: Any, task: str, settings: Settings, dim: int) -> tuple[Settings, dict[str, np.ndarray]]:
    """item_cf's settings with the task's tuned knobs (when tuning is on) and every clustered user's unit vector under
    its user similarity (content, taste or blend), as ``clusterrag_retrievals`` used them."""
    from prag_models.methods.knobs import UserSpace, read_tuned_table, with_knobs

    if settings.tuning.enabled:
        settings = with_knobs(settings, read_tuned_table(con, TUNED_TABLE, task).get(METHOD, {}))
    space = UserSpace(con, task, settings, dim)
    return settings, dict(zip(space.ids, space.vectors(settings), strict=True))


@dataclass
class ServedItemCf:
    """item_cf of one task as the pyfunc serves it: the retriever (the index, the users' vectors, the knobs), the
    settings with the tuned knobs, and how it was made (the ``models`` column of its rows)."""

    retriever: ItemCfRetriever
    settings: Settings
    described: str


def read_item_cf(path: Path, live: Path, task: str, index: ProfileIndex, settings: Settings) -> ServedItemCf:
    """item_cf over a served profile index, its knobs and user vectors read from the DuckDB file ``path`` (``live``:
    the live file; a snapshot older than the newest consent statement is refused, as for the index)."""
    from prag_models.privacy.rules import require_current_consent
    from prag_models.storage.store import read_connection

    with read_connection(path, wait_s=5.0) as (con, opened):
        require_current_consent(con, live, opened if Path(path) == Path(live) else f"snapshot {path}")
        tuned, vectors = item_cf_inputs(con, task, settings, index.vectors.shape[1])
    c = tuned.item_cf
    described = (f"item_cf (no trained model; knobs: sharpness {c.sharpness:g}, shortlist {c.shortlist}, "
                 f"{tuned.clustering.user_similarity} user similarity; {opened} {Path(path).name})")  # fmt: skip
    return ServedItemCf(ItemCfRetriever(index, vectors, c.sharpness, c.shortlist), tuned, described)


def item_cf_rows(served: ServedItemCf, task: str, user_ids: Sequence[str], queries: np.ndarray) -> list[dict]:
    """The pyfunc's output rows of item_cf for (user, query vector) pairs: the top k texts, each with the user whose
    copy is shown and how many users the asker may see wrote it (``writers``); ``cold_start``: no user vector (a new
    user: every author weighs the same)."""
    vectors: Mapping[str, np.ndarray] = served.retriever.user_vectors
    rows = []
    for user_id, q in zip(user_ids, queries, strict=True):
        found = served.retriever.retrieve(user_id, np.asarray(q, dtype=np.float32), served.settings.retrieval.k)
        rows.append({"task": task, "user_id": user_id, "method": METHOD, "cold_start": user_id not in vectors,
                     "doc_ids": [str(r.doc_id) for r in found],
                     "source_user_ids": [str(r.source_user_id) for r in found],
                     "scores": [float(r.score) for r in found], "writers": [int(r.writers) for r in found],
                     "models": served.described})  # fmt: skip
    return rows
