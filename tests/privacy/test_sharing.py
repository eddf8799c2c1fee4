"""The sharing rule (docs/privacy.md): consent and visibility from the data, and one way to other users' documents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import numpy as np
import pytest

from prag_models.data.lamp import load_lamp_split
from prag_models.data.sharing import SharingFile, parse_sharing, sharing_frames
from prag_models.data.tasks import LampDataError
from prag_models.methods import baselines, clusterrag
from prag_models.methods.cfrag.candidates import cosine_scorer, per_user_top_k
from prag_models.methods.community import CommunityRetriever
from prag_models.methods.profiles import ProfileIndex
from prag_models.privacy.rules import opted_out_users, shareable_flags
from prag_models.storage.store import replace_many

ROOT = Path(__file__).resolve().parents[2]


def _index() -> ProfileIndex:
    """u shares; v does not; w shares but made w2 private. Every document points along the query axis."""
    users = ["u", "u", "v", "v", "w", "w"]
    ids = ["u1", "u2", "v1", "v2", "w1", "w2"]
    vecs = np.tile(np.array([1.0, 0.0], dtype=np.float32), (6, 1))
    shareable = np.array([True, True, False, False, True, False])
    return ProfileIndex(ids, users, ids, vecs, shareable)


def test_visible_rows_own_all_others_only_shareable() -> None:
    index = _index()
    assert [index.doc_ids[r] for r in index.visible_rows("v", ["v", "u", "w"])] == ["v1", "v2", "u1", "u2", "w1"]
    assert [index.doc_ids[r] for r in index.visible_rows("u")] == ["u1", "u2", "w1"]
    assert [index.doc_ids[r] for r in index.visible_rows("w", ["v"])] == []
    bare = ProfileIndex(index.doc_ids, index.user_ids, index.texts, index.vectors)  # no flags: nothing leaves
    assert [bare.doc_ids[r] for r in bare.visible_rows("u")] == ["u1", "u2"]


def test_every_collaborative_path_applies_the_rule() -> None:
    index, q = _index(), np.array([1.0, 0.0], dtype=np.float32)
    hidden = {"v1", "v2", "w2"}
    for mode in ("collaborative", "hybrid"):
        found = clusterrag.retrieve_profile_mode(index, mode, "u", ["v", "w"], q, 10)
        assert not hidden & {r.doc_id for r in found}
    # a non-sharing user still receives the documents of users who share
    found = clusterrag.retrieve_profile_mode(index, "collaborative", "v", ["u", "w"], q, 10)
    assert {r.doc_id for r in found} == {"u1", "u2", "w1"}
    glob = baselines.retrieve_dense_global(index, ["u", "v"], np.stack([q, q]), 10)
    assert {r.doc_id for r in glob[0]} == {"u1", "u2", "w1"}
    assert {r.doc_id for r in glob[1]} == {"u1", "u2", "w1", "v1", "v2"}
    cands = per_user_top_k(index, "u", ["u", "v", "w"], 5, cosine_scorer(index, q))
    assert {r.doc_id for r in cands} == {"u1", "u2", "w1"}
    community = CommunityRetriever(index, {"u": 0, "v": 0, "w": 0}, {k: q for k in "uvw"})
    assert not hidden & {r.doc_id for r in community.retrieve("u", q, 10)}
    assert {"v1", "v2"} <= {r.doc_id for r in community.retrieve("v", q, 10)}
    pool = index.visible_rows("u", clusterrag.profile_users("hybrid", "u", ["v", "w"]))
    assert not hidden & {index.doc_ids[r] for r in pool}


def test_no_second_way_in() -> None:
    """Only profiles.py touches a user's rows; the old open accessors are gone."""
    assert not hasattr(ProfileIndex, "rows_of")
    offenders = []
    for path in [*ROOT.glob("prag_models/**/*.py"), *ROOT.glob("prag_assets/**/*.py")]:
        if path.name == "profiles.py":
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"_rows_by_user|_shared_by_user|\.rows_of\(|\.rows_by_user", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def _question(sid: str, user: str, docs: list[dict], **extra) -> dict:
    return {"id": sid, "user_id": user, "input": 'Which tag does this movie relate to? description: a heist',
            "profile": docs, **extra}  # fmt: skip


def test_lamp_fields_and_side_file(tmp_path) -> None:
    doc = {"id": "d1", "description": "secret plan", "tag": "twist ending", "visibility": "private"}
    other = {"id": "d2", "description": "open plan", "tag": "twist ending"}
    path = tmp_path / "q.json"
    path.write_text(json.dumps([_question("s1", "u", [doc, other], share=False),
                                _question("s2", "v", [other])]), encoding="utf-8")  # fmt: skip
    samples = load_lamp_split(path, None, "LaMP-2", "dev")
    assert samples[0].share is False and samples[1].share is None
    assert samples[0].profile[0].visibility == "private"
    side = parse_sharing({"users": {"v": {"share": False}}, "private_documents": [{"user_id": "v", "id": "d2"}]},
                         tmp_path / "sharing.json")  # fmt: skip
    sharing, visibility = sharing_frames("LaMP-2", samples, side, default_share=True)
    assert sharing.set_index("user_id")["share"].to_dict() == {"u": False, "v": False}
    assert set(sharing["source"]) == {"record", "sharing.json"}
    assert set(map(tuple, visibility[["user_id", "doc_id", "visibility"]].to_numpy())) == {
        ("u", "d1", "private"), ("v", "d2", "private")}
    sharing, _ = sharing_frames("LaMP-2", samples[1:], SharingFile(), default_share=False)
    assert sharing["share"].tolist() == [False] and sharing["source"].tolist() == ["default"]
    path.write_text(json.dumps([_question("s1", "u", [{**other, "visibility": "friends"}])]), encoding="utf-8")
    with pytest.raises(LampDataError, match="visibility"):
        load_lamp_split(path, None, "LaMP-2", "dev")
    with pytest.raises(LampDataError, match="share"):
        parse_sharing({"users": {"u": {"share": "no"}}}, tmp_path / "sharing.json")


def test_flags_from_duckdb_and_opt_out(tmp_path) -> None:
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    samples = [type("S", (), {"user_id": u, "share": s, "profile": ()})() for u, s in [("u", None), ("v", False)]]
    sharing, visibility = sharing_frames("LaMP-2", samples, SharingFile(private_pairs=frozenset()), True)
    visibility.loc[0] = ["LaMP-2", "u", "d2", "private"]
    replace_many(con, [("user_sharing", sharing, {"task": "LaMP-2"}),
                       ("document_visibility", visibility, {"task": "LaMP-2"})])  # fmt: skip
    flags = shareable_flags(con, "LaMP-2", ["u", "u", "v", "x"], ["d1", "d2", "d3", "d4"], default_share=False)
    assert flags.tolist() == [True, False, False, False]
    out = opted_out_users([f"u{i}" for i in range(10)], 0.5, 0)
    assert len(out) == 5 and out == opted_out_users([f"u{i}" for i in range(10)], 0.5, 0)


def test_prag_ingest_records_state_consent_and_visibility(tmp_path) -> None:
    from prag_models.data.history import ingest_files

    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    samples = [type("S", (), {"user_id": "u", "share": None, "profile": ()})()]
    sharing, visibility = sharing_frames("LaMP-2", samples, SharingFile(), True)
    replace_many(con, [("user_sharing", sharing, {"task": "LaMP-2"})])
    doc = {"description": "a heist", "tag": "twist ending"}
    path = tmp_path / "new.json"
    path.write_text(json.dumps([{"user_id": "u", "id": "d1", "share": False, **doc},
                                {"user_id": "n", "id": "d2", "visibility": "private", **doc},
                                {"user_id": "n", "id": "d3", **doc}]), encoding="utf-8")  # fmt: skip
    ingest_files(con, [path], "LaMP-2")
    flags = shareable_flags(con, "LaMP-2", ["u", "n", "n"], ["d1", "d2", "d3"], default_share=True)
    assert flags.tolist() == [False, False, True]
    path.write_text(json.dumps([{"user_id": "n", "id": "d4", "share": "no", **doc}]), encoding="utf-8")
    with pytest.raises(LampDataError, match="share"):
        ingest_files(con, [path], "LaMP-2")
