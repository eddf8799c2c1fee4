"""LaMP metrics, retrieval metrics and bootstrap intervals (above data, below methods)."""
