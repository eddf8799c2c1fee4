"""LaMP task prompts, profile token budgeting and output parsing (docs/methods.md §1)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence

from prag_models.data.tasks import INPUT_TEMPLATES, LABELS, LAMP2_TAGS

#: Bump when the prompt text changes: it is part of the feedback-label key.
PROMPT_VERSION = "v1"

_INSTRUCTIONS = {
    "LaMP-1": "please choose one of the following two references that is more relevant to the user's input title. "
    'Please just answer with "[1]" or "[2]" without explanation.',
    "LaMP-2": "please select the tag from [" + ", ".join(LAMP2_TAGS) + "] that is most relevant to the user's input "
    "description. Please just answer with the tag name without explanation.",
    "LaMP-3": "what is the score of the user's input review on a scale of 1 to 5? Please just answer with 1, 2, 3, 4, "
    "or 5 without explanation.",
    "LaMP-4": "please generate a headline for the user's input article. Please generate it in the following format: "
    '{"title": "generated title"} without explanation, and use only English.',
    "LaMP-5": "please generate a title for the user's input abstract. Please generate it in the following format: "
    '{"title": "generated title"} without explanation, and use only English.',
    "LaMP-7": "please paraphrase the user's input tweet in the user's style. Please generate it in the following "
    'format: {"tweet": "generated tweet"} without explanation, and use only English.',
}
_JSON_KEY = {"LaMP-4": "title", "LaMP-5": "title", "LaMP-7": "tweet"}


def prompt_document(task: str, text: str, fields: Mapping[str, str], writers: int = 1) -> str:
    """A profile document as the prompt shows it: the retrieval text, plus the rating for LaMP-3 (its label); a text
    that stands for ``writers`` > 1 users' identical documents opens with their count (``agreement``)."""
    if task == "LaMP-3" and fields.get("score") is not None:
        text = f"'review': {fields.get('text', text)} 'score': {fields['score']}"
    return agreement(text, writers)


def agreement(document: str, writers: int) -> str:
    """A prompt document with the number of users who wrote it in front, ``(3 users) …`` (unchanged for one): where
    several users gave an item the same label, their identical documents show once and say so (docs/methods.md §0).
    In front, so that the profile budget's truncation of a long document keeps it."""
    return f"({int(writers)} users) {document}" if writers > 1 else document


def budget_documents(
    docs: Sequence[str],
    query: str,
    count_tokens: Callable[[str], int],
    truncate: Callable[[str, int], str],
    max_prompt_tokens: int,
    query_share: float,
) -> tuple[list[str], str]:
    """Fit the query and documents into L_max tokens; unused per-document budget carries over (docs/methods.md §1).

    The query keeps min(|q|, ⌊γ·L_max⌋) tokens; the rest is shared by the documents in order, each getting
    remaining_budget / remaining_docs tokens.
    """
    query_cap = int(query_share * max_prompt_tokens)
    q_tokens = count_tokens(query)
    if q_tokens > query_cap:
        query = truncate(query, query_cap)
        q_tokens = query_cap
    remaining = max_prompt_tokens - q_tokens
    fitted: list[str] = []
    for i, doc in enumerate(docs):
        share = remaining // (len(docs) - i)
        n = count_tokens(doc)
        if n > share:
            doc = truncate(doc, share)
            n = share
        if doc:
            fitted.append(doc)
        remaining -= n
    return fitted, query


PROFILE_HEADER = "The historical profiles are as follows:"
CONTENT_FREE = "N/A"


def has_profile(prompt: str) -> bool:
    """True for a LaMP prompt that holds retrieved profile documents (False: zero-shot)."""
    return prompt.startswith(PROFILE_HEADER)


def content_free_prompts(task: str) -> tuple[str, str]:
    """(zero-shot, with-profile) LaMP prompts whose user input and document are "N/A" (label-prior calibration)."""
    fields = {"t": CONTENT_FREE, "a": CONTENT_FREE, "b": CONTENT_FREE, "x": CONTENT_FREE}
    user_input = INPUT_TEMPLATES[task].format(**fields)
    return build_prompt(task, user_input, []), build_prompt(task, user_input, [CONTENT_FREE])


def build_prompt(task: str, user_input: str, docs: Sequence[str]) -> str:
    """The LaMP prompt: retrieved profile documents, the task instruction, then the user input (zero-shot: no docs)."""
    instruction = _INSTRUCTIONS[task]
    if not docs:
        return f"{instruction[0].upper()}{instruction[1:]}\nUser input: {user_input}"
    profiles = "\n".join(f"{i}. {d}" for i, d in enumerate(docs, 1))
    return (
        f"{PROFILE_HEADER}\n{profiles}\n"
        f"Based on the historical profiles provided, {instruction}\nUser input: {user_input}"
    )


def parse_output(task: str, raw: str) -> str:
    """Turn a raw generation into the prediction the LaMP metric scores.

    Classification/rating: the first label of the task's label set that appears (a small model often wraps the
    label in words); if none appears the stripped text is kept and scores as a wrong label. Generation: the value of
    the JSON field the prompt asked for, else the first non-empty line.
    """
    text = raw.strip()
    if task in _JSON_KEY:
        return _parse_json_field(text, _JSON_KEY[task])
    if task == "LaMP-1":
        m = re.search(r"\[\s*([12])\s*\]", text) or re.search(r"\b([12])\b", text)
        return f"[{m.group(1)}]" if m else text
    if task == "LaMP-3":
        m = re.search(r"(?<![\d.])([1-5])(?:\.0+)?(?![\d.])", text)
        return m.group(1) if m else text
    lowered = text.lower()
    hits = [(lowered.find(tag), -len(tag), tag) for tag in LABELS[task] if tag in lowered]
    return min(hits)[2] if hits else text


def _parse_json_field(text: str, key: str) -> str:
    """Extract {"key": value} from a generation, tolerating text around the JSON."""
    for candidate in re.findall(r"\{.*?\}", text, flags=re.S):
        try:
            value = json.loads(candidate).get(key)
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(value, str) and value.strip():
            return value.strip()
    m = re.search(rf'"{key}"\s*:\s*"([^"]*)', text)
    if m and m.group(1).strip():
        return m.group(1).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else ""
