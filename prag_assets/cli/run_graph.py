"""The run behind `prag materialize`: an in-process materialization of an asset selection with the prag home's
Dagster instance (runs and event logs in its storage, so the Dagster UI shows them), in place of the superseded
`dagster asset materialize` command. Started by prag_assets/cli/commands.py in its own process:

    python -m prag_assets.cli.run_graph (--job NAME | --select '<selection>') [--partition-range A...B | --partition P]
        [--tag k=v]

A defined job (``prag_demo``, ``incremental_update_job``, ...) runs under its name, so the UI's Runs and Jobs pages
show which pipeline ran; a custom selection runs as Dagster's unnamed asset job.

Exit code 0 when the run succeeded, 1 when it failed. The process ends with os._exit after flushing its output:
native libraries (DuckDB's nanobind bindings, llama.cpp) otherwise print reference-leak reports at interpreter exit
about objects that are freed with the process anyway."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

#: Tags of a single run over a task range (assets with BackfillPolicy.single_run, as `dagster asset materialize`).
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def run(select: str, partition_range: str | None, tags: dict[str, str], partition: str | None = None,
        job: str = "", run_config: dict | None = None) -> bool:  # fmt: skip
    """Run the named job, else materialize the selection (with its asset checks), in this process, recorded in the
    configured instance."""
    import dagster as dg

    from prag_assets.automation.demo_job import location_tags
    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    tags = {**tags, **location_tags()}  # listed under the workspace's job pages (issue 50.1)
    if partition_range:
        start, _, end = partition_range.partition("...")
        tags = {**tags, RANGE_START: start, RANGE_END: end}
    with dg.DagsterInstance.get() as instance:
        if job:
            return run_named_job(instance, job, run_config, tags | ({PARTITION: partition} if partition else {}))
        assets = [*defs.assets, *defs.asset_checks]
        selection = dg.AssetSelection.from_coercible(select.split(","))
        result = dg.materialize(assets, instance=instance, selection=selection, tags=tags, partition_key=partition,
                                resources=default_resources(), raise_on_error=False)  # fmt: skip
    return result.success


#: The tag of a run over one partition.
PARTITION = "dagster/partition"


def workspace_origin(job: str) -> Any:
    """The origin Dagster gives a run launched from the workspace's code location (workspace.yaml: module
    prag_assets.definitions, location "prag", its Definitions' repository): the UI places runs by it — the job's
    page, the Overview timeline, re-execution (issue 50.1)."""
    from dagster._core.remote_origin import (
        ManagedGrpcPythonEnvCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    from prag_assets.automation.demo_job import LOCATION_NAME, REPOSITORY_NAME

    target = LoadableTargetOrigin(executable_path=sys.executable, module_name="prag_assets.definitions",
                                  working_directory=os.getcwd())  # fmt: skip
    location = ManagedGrpcPythonEnvCodeLocationOrigin(target, LOCATION_NAME)
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, REPOSITORY_NAME), job)


def run_named_job(instance: Any, job: str, run_config: dict | None, tags: dict[str, str]) -> bool:
    """Run a job of prag_assets.definitions in this process as a run of the workspace's code location (its origin
    recorded, as `dagster job launch -w workspace.yaml` records it), with the Definitions' in-process executor."""
    from dagster._core.execution.api import execute_run

    recon_job, dagster_run = named_run(instance, job, run_config, tags)
    return execute_run(recon_job, dagster_run, instance, raise_on_error=False).success


def named_run(instance: Any, job: str, run_config: dict | None, tags: dict[str, str]) -> tuple[Any, Any]:
    """(the reconstructable job, its new run in the instance): the run carries the job's own run tags under the
    given ones, as a launch from the UI does: `prag evidence`'s phase tag is what makes its stages spend
    run.evidence_budget_s (prag_assets/execution.py evidence_run)."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    recon = ReconstructableRepository.for_module("prag_assets.definitions", "defs", os.getcwd())
    recon_job = recon.get_reconstructable_job(job)
    definition = recon_job.get_definition()
    dagster_run = instance.create_run_for_job(definition, run_config=run_config, tags={**definition.run_tags, **tags},
                                              remote_job_origin=workspace_origin(job),
                                              job_code_origin=recon_job.get_python_origin())  # fmt: skip
    return recon_job, dagster_run


#: Where a run records the settings it was given as PRAG__ variables (scripts/run_settings.sh loads them for the UI).
RUN_SETTINGS_FILE = "run_settings.env"


def record_run_settings(environ: dict[str, str] | None = None) -> Path:
    """Write the settings this run has from PRAG__ variables (not run.*: a budget's cuts are run configuration) to
    the home's run_settings.env, as shell assignments: scripts/ui.sh sources it, so that the UI's definitions are
    the configuration the home's tables were last made with, and a materialization launched there runs it (issue
    50.2). Written whole or not at all."""
    import shlex

    from prag_models.config.settings import load_settings

    environ = dict(os.environ if environ is None else environ)
    home = load_settings(environ=environ).home_path
    lines = [f"{k}={shlex.quote(v)}" for k, v in sorted(environ.items())
             if k.startswith("PRAG__") and not k.startswith("PRAG__RUN__")]  # fmt: skip
    home.mkdir(parents=True, exist_ok=True)
    target, partial = home / RUN_SETTINGS_FILE, home / f".{RUN_SETTINGS_FILE}.partial"
    partial.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    partial.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run; the exit code says whether the run succeeded."""
    parser = argparse.ArgumentParser(prog="python -m prag_assets.cli.run_graph", description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--job", default="", help="a job of prag_assets.definitions, e.g. prag_demo")
    what.add_argument("--select", default="", help="Dagster asset selection (an unnamed asset job)")
    parser.add_argument("--partition-range", help="task range START...END, run as one run")
    parser.add_argument("--partition", help="one partition (a task)")
    parser.add_argument("--tag", action="append", default=[], help="run tag key=value")
    parser.add_argument("--run-config", default="", help="the job's run config as JSON (with --job)")
    args = parser.parse_args(argv)
    tags = dict(t.split("=", 1) for t in args.tag)
    config = json.loads(args.run_config) if args.run_config else None
    record_run_settings()
    return 0 if run(args.select, args.partition_range, tags, args.partition, args.job, config) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
