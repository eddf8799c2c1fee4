"""Quiet model loading: transformers draws a "Loading weights" progress bar for every model it loads; prag loads
several per run (embedder, rerankers, generator) and reports progress in its own logs, so the bar is hidden while a
model loads and restored afterwards (nothing else is silenced)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Hide transformers' and huggingface_hub's progress bars for the duration of a model load."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
