"""CFRAG (docs/methods.md §2): contrastive user encoder, similar-user retrieval, personalized retriever and reranker.

Plain PyTorch/transformers code with no Dagster dependency; the submodules import torch at module level, so import
them lazily from code that the Dagster definitions load.
"""
