"""Partitioned checks report per task partition in a single run over a task range (what `prag materialize` does)."""

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus as Status

TASKS = ["LaMP-2", "LaMP-3"]
SAMPLES = dg.AssetCheckKey(dg.AssetKey("lamp_samples"), "samples_valid")
DOCUMENTS = dg.AssetCheckKey(dg.AssetKey("profile_documents"), "documents_valid")
SELECTION = ["lamp_samples", "profile_documents", "document_embeddings"]


def _statuses(instance: dg.DagsterInstance, key: dg.AssetCheckKey) -> dict[str | None, Status]:
    """The latest execution status of a check per partition, as the UI reads it from the instance."""
    infos = instance.event_log_storage.get_asset_check_partition_info([key])
    return {i.partition_key: i.latest_execution_status for i in infos}


def _run(config, instance, selection=SELECTION, raise_on_error: bool = True, **kwargs):
    """Materialize a selection in one in-process run on the given instance (by default over the task range)."""
    from prag_assets.definitions import defs
    from prag_assets.resources.resource_set import default_resources

    tags = {"dagster/asset_partition_range_start": TASKS[0], "dagster/asset_partition_range_end": TASKS[-1]}
    return dg.materialize(
        [*defs.assets, *defs.asset_checks], resources=default_resources(config_file=str(config)), instance=instance,
        selection=selection, raise_on_error=raise_on_error, **(kwargs or {"tags": tags}),
    )  # fmt: skip


def test_each_task_partition_has_its_own_passed_check(tiny_config) -> None:
    """A range run records one SUCCEEDED evaluation per task and check (no planned-only 'Skipped' partition)."""
    with dg.instance_for_test() as instance:
        result = _run(tiny_config, instance)
        assert result.success
        for key in (SAMPLES, DOCUMENTS):
            assert _statuses(instance, key) == {t: Status.SUCCEEDED for t in TASKS}
            history = instance.event_log_storage.get_asset_check_execution_history(key, limit=10)
            evaluations = {r.partition: r.event.dagster_event.event_specific_data for r in history}
            assert set(evaluations) == set(TASKS)
            for task, evaluation in evaluations.items():
                assert evaluation.metadata["task"].value == task and evaluation.metadata["rows"].value > 0
                assert evaluation.target_materialization_data is not None  # points at that task's materialization


def test_a_failing_task_fails_alone_and_still_blocks(tiny_config, monkeypatch) -> None:
    """One task's rows fail: its partition is FAILED, the other SUCCEEDED, and nothing downstream runs."""
    from prag_assets.checks import lamp_checks

    real = lamp_checks.validate_frame

    def fail_lamp3(name, df, suite):
        ok, problems = real(name, df, suite)
        return (False, [*problems, "planted problem"]) if name == "profile_documents_LaMP3" else (ok, problems)

    monkeypatch.setattr(lamp_checks, "validate_frame", fail_lamp3)
    with dg.instance_for_test() as instance:
        result = _run(tiny_config, instance, raise_on_error=False)
        assert not result.success
        assert _statuses(instance, DOCUMENTS) == {"LaMP-2": Status.SUCCEEDED, "LaMP-3": Status.FAILED}
        assert _statuses(instance, SAMPLES) == {t: Status.SUCCEEDED for t in TASKS}
        assert not result.asset_materializations_for_node("document_embeddings")


def test_single_partition_run_reports_that_partition(tiny_config) -> None:
    """A run of one partition (the UI's 'Materialize' of one task) reports that partition alone."""
    with dg.instance_for_test() as instance:
        assert _run(tiny_config, instance, selection=["lamp_samples"], partition_key="LaMP-3").success
        assert _statuses(instance, SAMPLES) == {"LaMP-3": Status.SUCCEEDED}
