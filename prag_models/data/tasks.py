"""LaMP task constants, profile-document rendering and query extraction (docs/methods.md §1).

Rendering (the exact strings ``render_document`` produces; ``X``/``Y`` are the field values, unchanged):

- LaMP-1 ``'title': X 'abstract': Y``
- LaMP-2 ``'description': X 'tag': Y``
- LaMP-3 ``X`` (the review text; the score stays in ``fields`` only)
- LaMP-4 ``'text': X 'title': Y``
- LaMP-5 ``'abstract': X 'title': Y``
- LaMP-7 ``X`` (the tweet text)
"""

from __future__ import annotations

import re
from collections.abc import Mapping


class LampDataError(ValueError):
    """Malformed LaMP data; the message names the file, the record and the field whenever they are known."""


TASKS: tuple[str, ...] = ("LaMP-1", "LaMP-2", "LaMP-3", "LaMP-4", "LaMP-5", "LaMP-7")

TASK_KIND: dict[str, str] = {
    "LaMP-1": "classification",
    "LaMP-2": "classification",
    "LaMP-3": "rating",
    "LaMP-4": "generation",
    "LaMP-5": "generation",
    "LaMP-7": "generation",
}

# The task fields every profile document must carry (docs/methods.md §1).
PROFILE_FIELDS: dict[str, tuple[str, ...]] = {
    "LaMP-1": ("title", "abstract"),
    "LaMP-2": ("description", "tag"),
    "LaMP-3": ("text", "score"),
    "LaMP-4": ("title", "text"),
    "LaMP-5": ("title", "abstract"),
    "LaMP-7": ("text",),
}

# The field that names the item a document labels, where a task has one (LaMP-2: the movie's description, the same
# text in every user's profile that tags the movie); item_cf gathers a query's item by it (docs/methods.md §5.2).
# Elsewhere a document's item is its own text.
ITEM_FIELDS: dict[str, str] = {"LaMP-2": "description"}

# Which fields the rendered document shows, in order; a single field is rendered bare (no 'name': prefix).
RENDER_FIELDS: dict[str, tuple[str, ...]] = {
    "LaMP-1": ("title", "abstract"),
    "LaMP-2": ("description", "tag"),
    "LaMP-3": ("text",),
    "LaMP-4": ("text", "title"),
    "LaMP-5": ("abstract", "title"),
    "LaMP-7": ("text",),
}

LAMP2_TAGS: tuple[str, ...] = (
    "sci-fi",
    "based on a book",
    "comedy",
    "action",
    "twist ending",
    "dystopia",
    "dark comedy",
    "classic",
    "psychology",
    "fantasy",
    "romance",
    "thought-provoking",
    "social commentary",
    "violence",
    "true story",
)

LABELS: dict[str, tuple[str, ...]] = {
    "LaMP-1": ("[1]", "[2]"),
    "LaMP-2": LAMP2_TAGS,
    "LaMP-3": ("1", "2", "3", "4", "5"),
}

# The real LaMP ``input`` templates; {x} is the description/review/article/abstract/tweet, LaMP-1 uses {t} {a} {b}.
INPUT_TEMPLATES: dict[str, str] = {
    "LaMP-1": 'For an author who has written the paper with the title "{t}", which reference is related? '
    'Just answer with [1] or [2] without explanation. [1]: "{a}" [2]: "{b}"',
    "LaMP-2": "Which tag does this movie relate to among the following tags? Just answer with the tag name without "
    "further explanation. tags: [" + ", ".join(LAMP2_TAGS) + "] description: {x}",
    "LaMP-3": "What is the score of the following review on a scale of 1 to 5? just answer with 1, 2, 3, 4, or 5 "
    "without further explanation. review: {x}",
    "LaMP-4": "Generate a headline for the following article: {x}",
    "LaMP-5": "Generate a title for the following abstract of a paper: {x}",
    "LaMP-7": "Paraphrase the following tweet without any explanation before or after it: {x}",
}

_TASK_NAME = re.compile(r"^(?:lamp)?[\s_-]*(\d+)(?:[\s_-]*(?:time|original|user))?$")


def task_from_name(name: str | int) -> str:
    """Canonical task name ("LaMP-2") from "LaMP-2", "LaMP_2", "lamp2", "2" (or 2); LampDataError otherwise."""
    match = _TASK_NAME.match(str(name).strip().lower())
    if match:
        task = f"LaMP-{int(match.group(1))}"
        if task in TASKS:
            return task
    raise LampDataError(f"unknown LaMP task {name!r}; known tasks: {', '.join(TASKS)}")


def render_document(task: str, fields: Mapping[str, object]) -> str:
    """The document text the retrievers embed, exactly as the module docstring lists it per task."""
    task = task_from_name(task)
    names = RENDER_FIELDS[task]
    missing = [n for n in names if n not in fields]
    if missing:
        raise LampDataError(f"{task} document: missing field(s) {missing} (needs {list(names)})")
    if len(names) == 1:
        return str(fields[names[0]])
    return " ".join(f"'{n}': {fields[n]}" for n in names)


_LAMP1_REFS = re.compile(r'\[1\]:\s*"(?P<a>.*)"\s*\[2\]:\s*"(?P<b>.*)"\s*$', re.DOTALL)
_LAMP1_REFS_LOOSE = re.compile(r"\[1\]:\s*(?P<a>.*?)\s*\[2\]:\s*(?P<b>.*)$", re.DOTALL)


def _after(text: str, *markers: str) -> str | None:
    """The stripped text after the first occurrence of the first marker present (case-insensitive)."""
    lowered = text.lower()
    for marker in markers:
        pos = lowered.find(marker)
        if pos >= 0:
            return text[pos + len(marker) :].strip()
    return None


def lamp1_references(input_text: str) -> tuple[str, str] | None:
    """The two candidate reference titles of a LaMP-1 input ([1], [2]), or None when the input has no such pair."""
    match = _LAMP1_REFS.search(input_text) or _LAMP1_REFS_LOOSE.search(input_text)
    return (match.group("a").strip(), match.group("b").strip()) if match else None


def extract_query(task: str, input_text: str) -> str:
    """The retrieval query inside a LaMP ``input`` (docs/methods.md §1); the whole input when the marker is absent."""
    task = task_from_name(task)
    query: str | None
    if task == "LaMP-1":
        refs = lamp1_references(input_text)
        query = f"{refs[0]} {refs[1]}" if refs else None
    elif task == "LaMP-2":
        query = _after(input_text, "description:")
    elif task == "LaMP-3":
        query = _after(input_text, "review:")
    elif task == "LaMP-4":
        query = _after(input_text, "article:")
    elif task == "LaMP-5":
        query = _after(input_text, "paper:", "abstract:")
    else:
        query = _after(input_text, ":")
    return query if query else input_text.strip()
