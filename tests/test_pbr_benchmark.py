"""benchmarks/pbr_personabench.py titles its PersonaBench tables by the community it reads (issue 42: it said
"community_1" whatever community --data named)."""

from __future__ import annotations

import importlib.util
import shutil

from conftest import ROOT
from test_pbr import BagOfWords
from test_retrieval_data import _personabench

from prag_models.methods.pbr_eval import EmbeddingCache


def _benchmark():
    spec = importlib.util.spec_from_file_location("pbr_personabench", ROOT / "benchmarks" / "pbr_personabench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_title_names_the_community_read(tmp_path, capsys) -> None:
    written = _personabench(tmp_path)  # .../personabench/community_1
    community_0 = written.parent / "community_0"
    shutil.move(written, community_0)
    bench = _benchmark()
    bench.personabench(community_0, EmbeddingCache(BagOfWords()), theta=0.5, k2=2, k1=2)
    out = capsys.readouterr().out
    heading = next(ln for ln in out.splitlines() if ln.startswith("## PersonaBench"))
    assert heading.startswith("## PersonaBench community_0 (noise 0.0)"), heading
    assert "community_1" not in out and "Only community_0 is read here" in out
