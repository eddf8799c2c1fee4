"""Where the heavy per-item work runs: the batch work itself (work.py), the engines that run it in the run's process
or on Ray (engines.py, ray_engine.py) and the Parquet shards they write for DuckDB's single writer (shards.py)."""
