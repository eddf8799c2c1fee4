"""Consent, visibility and forgetting rules (above data and storage, below methods)."""
