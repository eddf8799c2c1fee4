"""OpenAI-compatible HTTP backend (/v1/chat/completions): how a vLLM or llama.cpp server is used. Stdlib only."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prag_models.config import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator


def chat_completions_url(base_url: str) -> str:
    """The chat completions endpoint for a base URL given with or without /v1 (or as the full endpoint)."""
    url = base_url.strip().rstrip("/")
    if not url:
        raise GenerationError("openai backend needs generator.base_url (e.g. http://127.0.0.1:8000/v1)")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


class _Retryable(Exception):
    """A failure worth another attempt (connection error, timeout, 5xx, 429)."""


class OpenAIGenerator(Generator):
    """Greedy chat completions from any OpenAI-compatible server; a batch is sent as concurrent requests."""

    def __init__(self, settings: GeneratorSettings, max_retries: int = 3, backoff_s: float = 0.5) -> None:
        self.settings = settings
        self.url = chat_completions_url(settings.base_url)
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        self.model_id = f"openai:{settings.model}@{self.url.removesuffix('/chat/completions')}"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        api_key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """One greedy completion per prompt, up to settings.batch_size requests in flight."""
        if not prompts:
            return []
        workers = max(1, min(self.settings.batch_size, len(prompts)))
        if workers == 1:
            return [self._complete(p, max_new_tokens) for p in prompts]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prag-openai") as pool:
            return list(pool.map(lambda p: self._complete(p, max_new_tokens), prompts))

    def _complete(self, prompt: str, max_new_tokens: int) -> str:
        """Send one chat request, retrying transient failures with exponential backoff."""
        body = json.dumps(
            {
                "model": self.settings.model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_new_tokens,
                "temperature": 0.0,
                "seed": self.settings.seed,
                "stream": False,
            }
        ).encode("utf-8")
        last_error = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                return self._post(body)
            except _Retryable as exc:
                last_error = str(exc)
        raise GenerationError(
            f"OpenAI-compatible server at {self.url} failed after {self.max_retries + 1} attempt(s): {last_error}"
        )

    def _post(self, body: bytes) -> str:
        """POST one request and return the message content; raise _Retryable for transient failures."""
        request = urllib.request.Request(self.url, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                payload: Any = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")[:500]
            if exc.code >= 500 or exc.code == 429:
                raise _Retryable(f"HTTP {exc.code}: {detail}") from None
            raise GenerationError(
                f"OpenAI-compatible server at {self.url} answered HTTP {exc.code}: {detail}"
            ) from None
        except urllib.error.URLError as exc:
            raise _Retryable(f"cannot connect: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise GenerationError(f"OpenAI-compatible server at {self.url} returned invalid JSON: {exc}") from None
        try:
            content = payload["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise GenerationError(
                f"OpenAI-compatible server at {self.url} returned an unexpected body: {str(payload)[:300]}"
            ) from None
        return (content or "").strip()
