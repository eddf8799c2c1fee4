"""The whole LaMP asset graph with the real packaged models on a tiny demo: the generation tasks (the others:
tests/test_graph_e2e.py; the shared body: tests/e2e_graph.py)."""

import pytest
from e2e_graph import run_whole_graph


@pytest.mark.slow
@pytest.mark.e2e
def test_whole_graph_with_real_packaged_models_on_generation_tasks(tmp_path):
    """Real MiniLM embedder and SmolLM2 GGUF through llama.cpp on LaMP-4, -5, -7 (answers generated), every method,
    then a re-run of the caching stages that embeds and generates nothing new."""
    run_whole_graph(tmp_path, ["LaMP-4", "LaMP-5", "LaMP-7"], {"generation"})
