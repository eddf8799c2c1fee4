"""What the CFRAG pyfunc (``mlops.pyfunc``) reads from the prag DuckDB file for one task and one user encoder: the
task's profile index (documents shown to others as the version's privacy settings and the current consent say, each
with its text and item key), e_u and the similar users, stored when made by the version's encoder, else re-encoded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


class UnknownSettingsError(LookupError):
    """A version logged before a settings section its inference needs was stored in its model_config."""


@dataclass
class TaskData:
    """What inference reads from DuckDB for one task and one user encoder."""

    index: Any  # ProfileIndex
    vectors: pd.DataFrame  # user_id, embedding (e_u)
    similar: pd.DataFrame  # user_id, neighbour_id, rank
    source: str  # which file, and whether e_u were stored or re-encoded
    embedder: Any = None  # EmbedderSettings that embed queries as the documents were (text.embedder.query_embedder)
    known: dict[str, Any] = field(default_factory=dict)  # user_id -> ServedUser, built once (a request is O(pool))

    def __post_init__(self) -> None:
        from prag_models.mlops.serving import ServedUser

        ranked = self.similar.sort_values(["user_id", "rank"]).groupby("user_id", sort=False)["neighbour_id"]
        neighbours = {u: list(n) for u, n in ranked}
        for user_id, e_u in zip(self.vectors["user_id"], self.vectors["embedding"], strict=True):
            found = neighbours.get(user_id) or [user_id]
            self.known[user_id] = ServedUser(user_id, False, found, "cfrag_similar_users",
                                             np.asarray(e_u, dtype=np.float32))  # fmt: skip

    def user(self, user_id: str, settings: Any, encoder: Any) -> Any:
        """A known user's e_u and neighbours by dictionary look-up; an unknown user's cold start."""
        from prag_models.mlops import serving

        known = self.known.get(user_id)
        return known if known is not None else serving.cfrag_user(user_id, self.vectors, self.similar, settings,
                                                                  encoder)  # fmt: skip


def read_task_data(
    path: Path, task: str, encoder: Any, encoder_ref: tuple[str, int], settings: Any, live: Path | None = None,
    unknown: Sequence[str] = (),
) -> TaskData:
    """Documents (shown to others as the version's privacy settings and the current consent say), e_u and similar
    users of a task (stored when made by ``encoder_ref``, else re-encoded); ``live``: the live file (``path``);
    ``unknown``: the sections the version's model_config lacks (no re-encode without clustering)."""
    live = live or path
    from prag_models.mlops import serving
    from prag_models.privacy.rules import require_current_consent
    from prag_models.storage.store import read_connection, read_rows, table_exists

    with read_connection(path, wait_s=5.0) as (con, opened):  # a live file held by a run: its snapshot
        # never a snapshot older than the newest consent statement (``path`` itself may be the snapshot)
        require_current_consent(con, live, opened if Path(path) == Path(live) else f"snapshot {path}")
        index, embedded = serving.read_task_index(con, task, settings.privacy.default_share)
        stored = table_exists(con, "cfrag_models") and table_exists(con, "cfrag_user_embeddings")
        made_by = next(iter(con.execute("SELECT registered_name, version FROM cfrag_models WHERE task = ? AND kind = "
                                        "'user_encoder'", [task]).fetchall()), None) if stored else None  # fmt: skip
        if made_by is not None and (made_by[0], int(made_by[1])) == encoder_ref:
            vectors = read_rows(con, "cfrag_user_embeddings", {"task": task}, order_by="user_id")
            similar = read_rows(con, "cfrag_similar_users", {"task": task})
            how = "stored e_u"
        else:
            described = f"{encoder_ref[0]} v{encoder_ref[1]}"
            if "clustering" in unknown:
                raise UnknownSettingsError(
                    f"{described} must re-encode the users of {task} (the stored CFRAG user tables were made by "
                    f"{'/'.join(map(str, made_by)) if made_by else 'no encoder'}), but it was registered before its "
                    "clustering settings were stored in its model_config: its similar users would be ranked by the "
                    "default clustering.user_similarity, not the one it was evaluated with; serve the version whose "
                    "encoder made the tables, or retrain (`prag materialize`) and promote a new version"
                )
            vectors, similar = serving.encode_task_users(con, task, encoder, settings, described)
            how = f"e_u re-encoded (tables made by {made_by[0]}/{made_by[1]})" if made_by else "e_u re-encoded"
    from prag_models.text.embedder import query_embedder

    embedder = query_embedder(settings.embedder, set(embedded), task)  # the model and the backend of the documents
    return TaskData(index, vectors, similar, f"{opened} {path.name}, {how}", embedder)
