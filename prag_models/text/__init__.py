"""Text encoders: the embedder and its cache (above data)."""
