"""OpenAI-compatible backend (/v1/chat/completions) through the ``openai`` client: how a vLLM or llama.cpp server is
used. Retries (connection errors, timeouts, 408/409/429/5xx, with exponential backoff) and timeouts are the client's."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from prag_models.config import GeneratorSettings
from prag_models.llm.base import GenerationError, Generator


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


class OpenAIGenerator(Generator):
    """Greedy chat completions from any OpenAI-compatible server; a batch is sent as concurrent requests."""

    def __init__(self, settings: GeneratorSettings, max_retries: int = 3, backoff_s: float = 0.5) -> None:
        import openai

        self.settings = settings
        self.url = chat_completions_url(settings.base_url)
        self.max_retries = max(0, max_retries)
        self.model_id = f"openai:{settings.model}@{api_base_url(settings.base_url)}"
        api_key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else ""
        # The client's backoff starts at 0.5 s; backoff_s is kept for callers but the client's schedule applies.
        self.backoff_s = backoff_s
        self._client = openai.OpenAI(
            base_url=api_base_url(settings.base_url),
            api_key=api_key or "not-needed",  # local servers accept any key; the client requires one
            timeout=settings.timeout_s,
            max_retries=self.max_retries,
        )

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
        """One chat request (the client retries transient failures); errors name the server and the attempts."""
        import openai

        attempts = f"{self.max_retries + 1} attempt(s)"
        try:
            response = self._client.chat.completions.create(
                model=self.settings.model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=max_new_tokens,
                temperature=0.0,
                seed=self.settings.seed,
            )
        except openai.APIStatusError as exc:
            raise GenerationError(
                f"OpenAI-compatible server at {self.url} answered HTTP {exc.status_code} after {attempts}: "
                f"{str(exc.message)[:500]}"
            ) from None
        except openai.APIConnectionError as exc:  # includes timeouts
            raise GenerationError(f"OpenAI-compatible server at {self.url} failed after {attempts}: {exc}") from None
        try:
            content = response.choices[0].message.content
        except (IndexError, AttributeError, TypeError):
            raise GenerationError(
                f"OpenAI-compatible server at {self.url} returned an unexpected body: {str(response)[:300]}"
            ) from None
        return (content or "").strip()

    def close(self) -> None:
        """Close the client's HTTP connections."""
        self._client.close()
