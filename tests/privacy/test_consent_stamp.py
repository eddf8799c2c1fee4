"""The consent stamp (docs/privacy.md "The served model"): a reader of the published snapshot refuses it when the live
file holds a newer consent statement; publishing resets the stamp, also after a rolled-back statement."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace

import duckdb
import pytest

from prag_models.data.sharing import append_statements, consent_stamp_path, read_consent_stamp
from prag_models.privacy.rules import StaleConsentError, publish_readers_snapshot, require_current_consent
from prag_models.storage.store import snapshot_path


def _state(con, when: datetime, user: str = "u1") -> None:
    append_statements(con, "LaMP-2", [SimpleNamespace(user_id=user, doc_id="d", share=False, visibility=None)],
                      when, "test")  # fmt: skip


def test_a_snapshot_older_than_the_newest_statement_is_refused(tmp_path) -> None:
    live = tmp_path / "prag.duckdb"
    t1, t2, t3 = (datetime(2026, 1, d) for d in (1, 2, 3))
    with duckdb.connect(str(live)) as con:
        _state(con, t1)
        publish_readers_snapshot(live, con)
    assert read_consent_stamp(live) == t1
    with duckdb.connect(str(snapshot_path(live)), read_only=True) as snap:
        require_current_consent(snap, live, "snapshot")  # holds t1: served
    with duckdb.connect(str(live)) as con:
        _state(con, t2, "u2")  # written, not republished (a run's drop-folder ingestion)
    with duckdb.connect(str(snapshot_path(live)), read_only=True) as snap:
        with pytest.raises(StaleConsentError, match="predates the consent statement"):
            require_current_consent(snap, live, "snapshot")
        require_current_consent(snap, live, "live")  # the live file holds every committed statement
    with duckdb.connect(str(live)) as con:
        con.execute("BEGIN TRANSACTION")
        _state(con, t3, "u3")
        con.execute("ROLLBACK")
        assert read_consent_stamp(live) == t3  # raised before the commit: fail closed
        publish_readers_snapshot(live, con)
    assert read_consent_stamp(live) == t2 and consent_stamp_path(live).is_file()
    with duckdb.connect(str(snapshot_path(live)), read_only=True) as snap:
        require_current_consent(snap, live, "snapshot")


def test_writers_republish_the_snapshot_when_they_added_a_statement(tmp_path) -> None:
    """`prag ingest` and the drop folder's profile_history asset call publish_if_consent_changed in their own
    connection: a new statement republishes the readers' snapshot (when there is one), nothing else does."""
    from prag_models.data.sharing import newest_statement
    from prag_models.privacy.rules import publish_if_consent_changed
    from prag_models.storage.store import publish_snapshot

    live = tmp_path / "prag.duckdb"
    with duckdb.connect(str(live)) as con:
        before = newest_statement(con)
        _state(con, datetime(2026, 1, 1))
        assert publish_if_consent_changed(con, before) is None  # no snapshot: readers read the live file
    publish_snapshot(live)
    with duckdb.connect(str(live)) as con:
        before = newest_statement(con)
        assert publish_if_consent_changed(con, before) is None  # nothing stated
        _state(con, datetime(2026, 1, 2), "u2")
        assert publish_if_consent_changed(con, before) == snapshot_path(live)
    with duckdb.connect(str(snapshot_path(live)), read_only=True) as snap:
        assert newest_statement(snap) == datetime(2026, 1, 2)
        require_current_consent(snap, live, "snapshot")
