"""Query-expansion baselines of the PBR paper (docs/methods.md §4.4): HyDE, Query2Term, MILL, CoT and ThinkQE.

The prompts are written here from the paper's appendix descriptions (not the exact wording). How an expansion
becomes a query vector:

- HyDE, Query2Term, CoT, ThinkQE: the text ``question + "\\n" + expansion`` is embedded (query2doc-style
  concatenation, so the question keeps its weight in the dense vector).
- MILL: the reply is parsed into its sub-queries/passages; the vector is the mean of the embeddings of the question
  and of each ``question + "\\n" + item`` (the question is one of the averaged "sub-queries", so an unparseable reply
  degrades to the plain question). The mean is not renormalised (inner-product search, like PBR).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from prag_models.llm.base import Generator

QE_METHODS: tuple[str, ...] = ("hyde", "query2term", "mill", "cot", "thinkqe")
#: Methods whose prompt shows passages retrieved with the plain question.
NEEDS_DOCS: frozenset[str] = frozenset({"thinkqe"})
MILL_ITEMS = 5


def qe_prompt(method: str, question: str, docs: Sequence[str] = ()) -> str:
    """The generation prompt of a QE baseline (ThinkQE also shows the top retrieved passages)."""
    if method == "hyde":
        return f"Write a short passage that answers the question below.\nQuestion: {question}\nPassage:"
    if method == "query2term":
        return (
            "Answer the question below. First give the rationale that leads to the answer, then the answer.\n"
            f"Question: {question}\nRationale and answer:"
        )
    if method == "mill":
        return (
            f"Break the question below into {MILL_ITEMS} sub-queries that together cover what it asks. For each "
            "sub-query write a short passage answering it. Reply with a Python list of "
            f'{MILL_ITEMS} strings only, each "sub-query: passage".\n'
            f"Question: {question}\nList:"
        )
    if method == "cot":
        return f"Answer the question below. Think it through step by step.\nQuestion: {question}\nStep by step:"
    if method == "thinkqe":
        shown = "\n".join(f"[{i + 1}] {d}" for i, d in enumerate(docs))
        return (
            "Here are passages retrieved for a question. Think about what they say and what is missing, then write "
            "one correct passage that answers the question.\n"
            f"Passages:\n{shown}\nQuestion: {question}\nPassage:"
        )
    raise ValueError(f"unknown query-expansion method {method!r}; known: {list(QE_METHODS)}")


def parse_list(text: str) -> tuple[list[str], str]:
    """Items of a MILL reply and the fallback used: ``python`` / ``json`` list literal, ``lines``, or ``empty``."""
    match = re.search(r"\[.*\]", text, re.DOTALL)
    if match:
        for kind, parse in (("python", ast.literal_eval), ("json", json.loads)):
            try:
                value = parse(match.group(0))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, (list, tuple)):
                items = [str(v).strip() for v in value if str(v).strip()]
                if items:
                    return items, kind
    lines = [re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", ln).strip().strip(",").strip("\"'") for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and ln not in {"[", "]"}]
    return (lines, "lines") if lines else ([], "empty")


def qe_query_texts(method: str, question: str, expansion: str) -> list[str]:
    """Texts whose embeddings are averaged into the method's query vector (see the module docstring)."""
    if method not in QE_METHODS:
        raise ValueError(f"unknown query-expansion method {method!r}; known: {list(QE_METHODS)}")
    if method == "mill":
        items, _ = parse_list(expansion)
        return [question, *(f"{question}\n{item}" for item in items)]
    text = expansion.strip()
    return [f"{question}\n{text}" if text else question]


def qe_query_vector(
    embed: Callable[[Sequence[str]], np.ndarray], method: str, question: str, expansion: str
) -> np.ndarray:
    """Query vector of a QE baseline: the mean embedding of :func:`qe_query_texts`."""
    emb = np.asarray(embed(qe_query_texts(method, question, expansion)), dtype=np.float32)
    return emb.mean(axis=0)


def generate_qe_expansions(
    generator: Generator,
    method: str,
    items: Sequence[tuple[str, str, Sequence[str]]],
    max_new_tokens: int = 256,
) -> dict[str, str]:
    """Generate one expansion per (q_id, question, retrieved docs) item with the configured LLM."""
    prompts = [qe_prompt(method, question, docs) for _, question, docs in items]
    outputs = generator.generate(prompts, max_new_tokens) if prompts else []
    return {q_id: out.strip() for (q_id, _, _), out in zip(items, outputs, strict=True)}
