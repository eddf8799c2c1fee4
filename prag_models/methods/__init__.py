"""Retrieval methods: baselines, ClusterRAG, community-wide, CFRAG, PBR (above users, generation, metrics)."""
