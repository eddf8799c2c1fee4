"""Retrieval and LLM evaluation, claims, the verdict and the report (above methods)."""
