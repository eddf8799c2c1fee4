"""The task partitions shared by every LaMP asset."""

import dagster as dg

from prag_models.config.settings import ALL_TASKS

task_partitions = dg.StaticPartitionsDefinition(list(ALL_TASKS))

#: One run materializes a whole range of tasks (models load once): `--partition-range 'LaMP-1...LaMP-7'`.
single_run = dg.BackfillPolicy.single_run()

#: Every step that writes DuckDB takes a slot of this pool; dagster.yaml limits it to one (one writer process).
DUCKDB_POOL = "prag_duckdb"
