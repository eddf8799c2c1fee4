"""A named job's run carries the job's own run tags (issue 47). `prag evidence` spends run.evidence_budget_s because
its job's phase tag says the run is the LLM evidence (prag_assets/execution.py ``evidence_run``). Runs of a named job
made as runs of the workspace's code location (e3a0472) had lost those tags: the evidence run then funded the
deferred utility tests from the main job's share (234 s of a 900 s evidence budget on the one-core proxy, two of four
deferred tasks left undecided)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from prag_assets.automation.demo_job import EVIDENCE_JOB, REAL_EVIDENCE_JOB
from prag_assets.cli.run_graph import named_run
from prag_assets.execution import EVIDENCE_PHASE, PHASE_TAG

ROOT = Path(__file__).resolve().parent.parent


def test_a_named_run_carries_its_jobs_tags_under_the_launch_tags(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # the code location's working directory, as `prag` runs it
    with dg.DagsterInstance.ephemeral() as instance:
        _, evidence = named_run(instance, EVIDENCE_JOB, None, {"prag/command": "prag evidence"})
        _, real = named_run(instance, REAL_EVIDENCE_JOB, None, {})
        config = {"ops": {"promote_cfrag_bundle": {"config": {"task": "LaMP-2", "reason": "test"}}}}
        _, promotion = named_run(instance, "promote_cfrag_models", config, {"prag/kind": "launched"})
        _, main = named_run(instance, "prag_demo", None, {"prag/command": "prag materialize"})
        stored = instance.get_run_by_id(evidence.run_id)
    assert evidence.tags[PHASE_TAG] == EVIDENCE_PHASE and evidence.tags["prag/command"] == "prag evidence"
    assert stored is not None and stored.tags[PHASE_TAG] == EVIDENCE_PHASE  # what the run's steps read
    assert real.tags[PHASE_TAG] == EVIDENCE_PHASE
    assert promotion.tags["prag/kind"] == "launched"  # a tag given at launch wins over the job's
    assert PHASE_TAG not in main.tags  # the main job spends the main budget
