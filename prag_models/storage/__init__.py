"""DuckDB storage, table catalog, data-quality helpers, hashing and fault injection (bottom layer)."""
