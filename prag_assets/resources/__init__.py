"""The Dagster resources: settings, the DuckDB file, the models, MLflow, the Ray cluster, and the set of them the
definitions use (resource_set)."""
