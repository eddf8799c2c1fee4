"""User embeddings, clusters and neighbours (above text; beside generation, privacy and metrics)."""
