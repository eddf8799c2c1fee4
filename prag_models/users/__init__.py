"""User embeddings, clusters and neighbours (above privacy and text; beside generation and metrics)."""
