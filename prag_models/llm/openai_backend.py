"""OpenAI-compatible backend (/v1/chat/completions) through the ``openai`` client: how a vLLM or llama.cpp server — or
a pool of them (``generator.base_urls``) — is used.

Requests are spread round-robin over the pool. A request that fails in a way worth retrying (connection error,
timeout, HTTP 408/409/429/5xx) moves to the next server, and a server that failed is skipped for ``COOLDOWN_S``
while another one is up; after a full round over the pool the next round waits (exponential backoff from
``backoff_s``). Other HTTP errors (a 400 for a too-long prompt) are not retried and name the server.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from prag_models.config.settings import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator

#: Seconds a server that failed is passed over while another server of the pool is up.
COOLDOWN_S = 30.0
_RETRY_STATUS = {408, 409, 429}


def api_base_url(base_url: str) -> str:
    """The client's base URL (ending in /v1) for a base URL given with or without /v1, or as the full endpoint."""
    url = base_url.strip().rstrip("/")
    if not url:
        raise GenerationError("openai backend needs generator.base_url (e.g. http://127.0.0.1:8000/v1)")
    url = url.removesuffix("/chat/completions")
    return url if url.endswith("/v1") else f"{url}/v1"


def chat_completions_url(base_url: str) -> str:
    """The chat completions endpoint a base URL resolves to (what error messages and the model id name)."""
    return f"{api_base_url(base_url)}/chat/completions"


def pool_urls(settings: GeneratorSettings) -> list[str]:
    """The servers of the pool: base_url then base_urls, normalised to their /v1 base, without duplicates."""
    urls = [u for u in (settings.base_url, *settings.base_urls) if u.strip()]
    if not urls:
        raise GenerationError(
            "openai backend needs generator.base_url or generator.base_urls (e.g. http://127.0.0.1:8000/v1)"
        )
    return list(dict.fromkeys(api_base_url(u) for u in urls))


class OpenAIGenerator(Generator):
    """Greedy chat completions from one or more OpenAI-compatible servers; a batch is sent as concurrent requests."""

    def __init__(self, settings: GeneratorSettings, max_retries: int = 3, backoff_s: float = 0.5) -> None:
        import openai

        self.settings = settings
        self.urls = pool_urls(settings)
        self.url = chat_completions_url(self.urls[0])
        self.max_retries = max(0, max_retries)
        self.backoff_s = backoff_s
        # One server keeps its URL in the cache key (as before pools existed); a pool must serve one set of weights,
        # so its key names the model only and adding or replacing a server keeps the cache.
        self.model_id = f"openai:{settings.model}@{self.urls[0] if len(self.urls) == 1 else 'pool'}"
        api_key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        self._clients = [
            openai.OpenAI(
                base_url=url,
                api_key=api_key or "not-needed",  # local servers accept any key; the client requires one
                timeout=settings.timeout_s,
                max_retries=0,  # retries are this class's: they may move to another server
            )
            for url in self.urls
        ]
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._down_until = [0.0] * len(self.urls)
        self.served = [0] * len(self.urls)  # answers per server (tests, metadata)

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """One greedy completion per prompt, up to settings.batch_size requests in flight."""
        if not prompts:
            return []
        workers = max(1, min(self.settings.batch_size, len(prompts)))
        if workers == 1:
            return [self._complete(p, max_new_tokens) for p in prompts]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prag-openai") as pool:
            return list(pool.map(lambda p: self._complete(p, max_new_tokens), prompts))

    def _order(self) -> list[int]:
        """Servers to try for one request: round-robin start, servers that failed recently last."""
        with self._lock:
            start = next(self._next) % len(self.urls)
        ring = [(start + i) % len(self.urls) for i in range(len(self.urls))]
        now = time.monotonic()
        return [i for i in ring if self._down_until[i] <= now] + [i for i in ring if self._down_until[i] > now]

    def _complete(self, prompt: str, max_new_tokens: int) -> str:
        """One chat request: each round tries every server once; errors name the servers and the attempts."""
        import openai

        errors: list[str] = []
        for round_ in range(self.max_retries + 1):
            if round_:
                time.sleep(self.backoff_s * 2 ** (round_ - 1))
            for i in self._order():
                url = chat_completions_url(self.urls[i])
                try:
                    response = self._clients[i].chat.completions.create(
                        model=self.settings.model,
                        messages=[{"role": "user", "content": prompt}],
                        max_tokens=max_new_tokens,
                        temperature=0.0,
                        seed=self.settings.seed,
                    )
                except openai.APIStatusError as exc:
                    if exc.status_code not in _RETRY_STATUS and exc.status_code < 500:
                        raise GenerationError(
                            f"OpenAI-compatible server at {url} answered HTTP {exc.status_code}: "
                            f"{str(exc.message)[:500]}"
                        ) from None
                    errors.append(f"{url}: HTTP {exc.status_code}")
                except openai.APIConnectionError as exc:  # includes timeouts
                    errors.append(f"{url}: {exc}")
                else:
                    with self._lock:
                        self._down_until[i] = 0.0
                        self.served[i] += 1
                    return _content(response, url)
                with self._lock:
                    self._down_until[i] = time.monotonic() + COOLDOWN_S
        attempts = f"{len(errors)} attempt(s)"
        where = f"at {url}" if len(self.urls) == 1 else f"of the pool {self.urls}"
        raise GenerationError(f"OpenAI-compatible server {where} failed after {attempts}: {errors[-1]}")

    def close(self) -> None:
        """Close the clients' HTTP connections."""
        for client in self._clients:
            client.close()


def _content(response: object, url: str) -> str:
    """The answer text of a chat completion (an unexpected body is a GenerationError naming the server)."""
    try:
        content = response.choices[0].message.content  # type: ignore[attr-defined]
    except (IndexError, AttributeError, TypeError):
        raise GenerationError(
            f"OpenAI-compatible server at {url} returned an unexpected body: {str(response)[:300]}"
        ) from None
    return (content or "").strip()
