"""LLM backends (llama.cpp, transformers, OpenAI-compatible HTTP, vLLM, fake) and the generation cache (above text)."""
