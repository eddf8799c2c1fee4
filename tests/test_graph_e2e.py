"""The whole LaMP asset graph with the real packaged models on a tiny demo: the classification and rating tasks
(the generation tasks: tests/test_graph_e2e_generation.py, on the other worker; the shared body: tests/e2e_graph.py)."""

import pytest
from e2e_graph import run_whole_graph


@pytest.mark.slow
@pytest.mark.e2e
def test_whole_graph_with_real_packaged_models(tmp_path):
    """Real MiniLM embedder and SmolLM2 GGUF through llama.cpp on LaMP-1, -2, -3 (answers by label scoring and by
    generation), every method, then a re-run of the caching stages that embeds and generates nothing new."""
    run_whole_graph(tmp_path, ["LaMP-1", "LaMP-2", "LaMP-3"], {"label_scoring"})
