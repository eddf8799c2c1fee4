"""MLflow registry, promotion, serving and the pyfunc wrapper (above methods; beside evaluation and compute)."""
