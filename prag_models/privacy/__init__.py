"""Consent, visibility and forgetting rules (above data and storage, below users and methods: the users layer's
taste vectors apply the sharing rule themselves)."""
