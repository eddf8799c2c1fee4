"""LaMP prompts and cached generation of answers (above data and llm, below methods)."""
