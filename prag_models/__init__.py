"""prag: personalized RAG with collaborative filtering — the ML library (no Dagster imports)."""
