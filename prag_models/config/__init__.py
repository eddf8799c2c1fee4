"""Settings: defaults, the TOML file, PRAG__* variables; the bottom layer (imports nothing of prag_models)."""
