"""PBR's P-PRF expansions as data: one question's pseudo utterances and reasoning, and the reader of the PBR
authors' cached expansion records (docs/methods.md §4.1, §4.5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PbrExpansion:
    """P-PRF output for one question: m pseudo utterances and one pseudo reasoning (docs/methods.md §4.1)."""

    pseudo_utterances: tuple[str, ...]
    reasoning: str
    source: str = "replay"  # replay | generate
    parse_fallback: str = "json"  # how the utterances were parsed, see parse_candidates


def expansions_from_records(records: Mapping[str, Mapping[str, Any]], where: str) -> dict[str, PbrExpansion]:
    """Cached expansions from q_id -> {"fake_10": [...], "reason": "..."} records (the authors' format)."""
    out: dict[str, PbrExpansion] = {}
    for q_id, rec in records.items():
        fake, reason = rec.get("fake_10"), rec.get("reason")
        if not isinstance(fake, list) or not isinstance(reason, str):
            raise ValueError(f"{where}: question {q_id!r} needs a list 'fake_10' and a string 'reason'")
        out[q_id] = PbrExpansion(tuple(str(x) for x in fake), reason, "replay", "json")
    return out
