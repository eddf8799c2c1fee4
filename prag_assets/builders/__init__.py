"""How asset definitions are built: the task-table and dataset-table factories, the CFRAG training factory with its
MLflow registry helpers, and the derived code versions."""
