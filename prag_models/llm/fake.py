"""A deterministic stand-in generator (no model) for fast tests of prompt plumbing and caching."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Sequence

from prag_models.llm.base import Generator

_USER_INPUT = "User input:"
_PROFILE_END = "Based on the historical profiles"
_TAG_LIST_RE = re.compile(r"select the tag from \[([^\]]*)\]")
_JSON_FORMAT_RE = re.compile(r'format: \{"(\w+)": "generated \w+"\}')
_RATING_RE = re.compile(r"(?<![\d.])([1-5])(?![\d.])")
_CHOICE_RE = re.compile(r"\[([12])\]")


def _pick(prompt: str, options: Sequence[str]) -> str:
    """A fixed choice among options, keyed on the prompt's hash."""
    digest = int(hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8], 16)
    return options[digest % len(options)]


def _majority(found: Sequence[str], prompt: str, options: Sequence[str]) -> str:
    """The most frequent option in found (ties: first by option order), else a hash-keyed choice."""
    counts = Counter(found)
    if counts:
        best = max(counts.values())
        return next(o for o in options if counts.get(o) == best)
    return _pick(prompt, options)


def _split(prompt: str) -> tuple[str, str]:
    """(the retrieved-profile part of a LaMP prompt, the user input); the profile part is empty when zero-shot."""
    head, sep, tail = prompt.rpartition(_USER_INPUT)
    profile = head.split(_PROFILE_END, 1)[0] if _PROFILE_END in head else ""
    return (profile, tail.strip()) if sep else ("", prompt.strip())


def fake_answer(prompt: str, max_new_tokens: int) -> str:
    """The fake's output: a label that appears in the prompt for LaMP classification, else the input's first words.

    LaMP-1: the reference number cited most in the profile part, LaMP-2: the listed tag mentioned most in the profile
    part, LaMP-3: the most frequent 1-5 score in the profile part (hash-keyed choice when the profile says nothing);
    LaMP-4/5/7: the requested JSON with the first words of the user input; anything else: its first words.
    """
    profile, user_input = _split(prompt)
    words = max(1, min(max_new_tokens, 8))
    first_words = " ".join(user_input.split()[:words])
    if '"[1]" or "[2]"' in prompt:
        return f"[{_majority(_CHOICE_RE.findall(profile), prompt, ['1', '2'])}]"
    tags = _TAG_LIST_RE.search(prompt)
    if tags:
        options = [t.strip() for t in tags.group(1).split(",") if t.strip()]
        if options:
            lowered = profile.lower()
            found = [o for o in options for _ in range(lowered.count(o.lower()))]
            return _majority(found, prompt, options)
    if "scale of 1 to 5" in prompt:
        return _majority(_RATING_RE.findall(profile), prompt, ["1", "2", "3", "4", "5"])
    fmt = _JSON_FORMAT_RE.search(prompt)
    if fmt:
        return json.dumps({fmt.group(1): first_words})
    return first_words


class FakeGenerator(Generator):
    """Deterministic, model-free generator: the output is a fixed function of the prompt (see fake_answer)."""

    model_id = "fake:v1"

    def __init__(self, settings: object | None = None) -> None:
        self.settings = settings
        self.calls = 0
        self.generated = 0

    can_score_choices = True

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """fake_answer for each prompt; counts calls and prompts for tests."""
        self.calls += 1
        self.generated += len(prompts)
        return [fake_answer(p, max_new_tokens) for p in prompts]

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        """A deterministic stand-in for a log-likelihood: each word of the choice is likelier the more often the
        prompt contains it (add-one smoothed unigram model of the prompt); a choice scores the sum over its words."""
        self.calls += 1
        self.generated += len(prompts)
        rows = []
        for prompt in prompts:
            words = re.findall(r"\w+", prompt.lower())
            counts = Counter(words)
            total = len(words) + 1000
            rows.append(
                [sum(math.log((counts[w] + 1) / total) for w in re.findall(r"\w+", c.lower())) for c in choices]
            )
        return rows
