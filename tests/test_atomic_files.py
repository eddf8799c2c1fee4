"""The stored speeds (reports/llm_budget.json, embedder_speed.json, run_budget.json) are written whole or not at all:
a run killed while writing one leaves the previous file readable, never half a file (issue 47's review)."""

import json
import os

import pytest

from prag_models.storage.files import write_json_atomic


def test_a_write_killed_before_its_rename_leaves_the_old_file_whole_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "embedder_speed.json"
    write_json_atomic(path, {"docs_per_s": 86.0})

    def killed(src, dst):  # the process dies between writing the new bytes and renaming them into place
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomic(path, {"docs_per_s": 12.0, "texts": list(range(10_000))})
    assert json.loads(path.read_text(encoding="utf-8")) == {"docs_per_s": 86.0}
    assert [p.name for p in tmp_path.iterdir()] == ["embedder_speed.json"]


def test_the_speed_files_are_written_through_the_atomic_writer():
    """Every writer of a stored speed file goes through write_json_atomic (a plain write_text would truncate first)."""
    import inspect

    from prag_assets.cli import budget
    from prag_models.evaluation import llm_budget, run_budget

    for module in (budget, llm_budget, run_budget):
        source = inspect.getsource(module)
        assert "write_json_atomic(" in source and ".write_text(" not in source, module.__name__
