"""One function per asset stage: read a task's inputs from DuckDB, call the method, return the rows to write.

The asset layer (prag_assets) only opens the connection, loops over the run's tasks, writes and reports metadata.
"""
