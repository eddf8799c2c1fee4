"""One time budget for the whole main job (issue 47; docs/running.md): `prag materialize` measures this machine's
embedder (here) and LLM (llm_budget.py) first, estimates the graph's work besides the LLM from the embedder's speed,
and gives the LLM work what is left of ``run.budget_s``: the LLM evaluation up to ``run.llm_budget_s``, the CFRAG
feedback probe the rest. A stage whose test its seconds cannot pay in full is not started (it says so): the feedback
probe of a task records "not measured on this machine" and CFRAG keeps its initialisation; a task's LLM utility is
deferred to the LLM evidence run (``prag evidence``). The speeds are stored under the home and reused while the
embedder settings and the CPU stay the same."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prag_models.config.settings import Settings
from prag_models.llm.speeds import cpu_description as cpu_description  # re-exported
from prag_models.storage.files import write_json_atomic

#: The graph's work other than the LLM and document embedding (user vectors and clustering, retrieval by every
#: method, the user encoder's training, tuning, checks, Dagster's start-up and the PersonaBench / LongMemEval group's
#: non-LLM stages), in seconds per second of document embedding on the same machine. Both scale with the CPU's
#: torch / BLAS speed: the demo measured 2.2 on 2 AVX-512 cores (93 s against 43 s) and 2.0 on a real 2-core
#: AVX2-only machine (594 s against 296 s, segments included), docs/measurements.md "The demo".
REST_PER_EMBED_S = 2.2
#: The same ratio where the embedder is faster than the rest of the graph's torch work: ONNX Runtime int8 embeds 1.36x
#: torch fp32's documents/s on one AVX2 core, the rest stays as fast, so the ratio grows; on the one-core AVX2 proxy
#: the rest took 236 s against 78 s of int8 embedding (docs/measurements.md "The demo"). ONNX Runtime fp32 (one text a
#: run, AVX-512's default): 3.2, the mean of two demos on 2 AVX-512 cores on 2026-12-05 (their non-LLM work less the
#: measuring took 239 s and 233 s against 54 s and 58 s of estimated embedding: 3.4 and 3.0 besides it); 2.7, torch's
#: ratio scaled by the embedder's speed-up, had under-estimated the graph by 17-38 s.
REST_PER_EMBED_BY_BACKEND = {"onnx_int8": 3.0, "onnx": 3.2}


def rest_per_embed_s(settings: Settings) -> float:
    """Seconds of the graph's non-LLM work per second of document embedding with this run's embedder backend."""
    from prag_models.text.embedder import resolve_backend

    return REST_PER_EMBED_BY_BACKEND.get(resolve_backend(settings.embedder), REST_PER_EMBED_S)
#: Texts embedded to time the embedder, after one warm-up batch (about a second on 2 AVX-512 cores).
EMBED_PROBE_TEXTS = 192
#: Bump when the embedder's measurement changes (a stored speed from an older one is measured again).
SPEED_VERSION = "v1"


@dataclass(frozen=True)
class RunBudget:
    """How `prag materialize` splits run.budget_s on this machine."""

    budget_s: float
    documents: int  # profile documents over the configured tasks
    embed_docs_per_s: float
    embed_s: float  # estimated document embedding (documents / speed)
    rest_s: float  # estimated non-LLM work besides embedding (rest_per_embed_s x embed_s)
    measured_s: float  # what measuring the machine took in this run (0 when stored speeds were reused)
    llm_s: float  # the LLM evaluation's seconds (utility, generated outputs, P-PRF): at most run.llm_budget_s
    feedback_s: float  # the CFRAG feedback probe's seconds over every task
    tuning_s: float = 0.0  # the search of knobs by the LLM utility over every task no label sees (0: none)

    def lines(self) -> list[str]:
        """What the budget decided, one line per part."""
        return [
            f"run budget {self.budget_s:.0f} s (run.budget_s): {self.documents:,} documents at "
            f"{self.embed_docs_per_s:,.0f} documents/s ≈ {self.embed_s:.0f} s of embedding, ≈ {self.rest_s:.0f} s "
            f"for the rest of the graph; the LLM evaluation gets {self.llm_s:.0f} s, "
            + (f"tuning without labels {self.tuning_s:.0f} s, " if self.tuning_s > 0 else "")
            + f"the CFRAG feedback probe {self.feedback_s:.0f} s",
        ]

    def metadata(self) -> dict[str, Any]:
        """The budget as a JSON-able dict."""
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in asdict(self).items()}


def label_free_tasks(settings: Settings) -> list[str]:
    """The configured tasks no label will see, known before any data is read: none on the demo (its planted relevance
    labels see every task); on LaMP files, which carry no relevance labels, every task but LaMP-2/3 (their documents'
    labels see them)."""
    from prag_models.evaluation.utility import LABEL_HIT_SEES

    return [] if settings.data.source == "demo" else [t for t in settings.data.tasks if t not in LABEL_HIT_SEES]


def utility_search_s(settings: Settings) -> float:
    """The seconds one task's searches by the LLM utility may take at most: tuning.utility_budget_s for ClusterRAG's
    two methods together and half of it for CFRAG's (evaluation/tuning.py METHOD_BUDGET_SHARE); 0 when not asked."""
    from prag_models.evaluation.tuning import KNOB_SPACE, LABEL_TUNED_ONLY, METHOD_BUDGET_SHARE
    from prag_models.evaluation.utility_objective import utility_tuning_asked

    if not utility_tuning_asked(settings):
        return 0.0
    searches = 1 + sum(m not in LABEL_TUNED_ONLY for m in KNOB_SPACE)  # CFRAG's and each ClusterRAG method's
    return searches * METHOD_BUDGET_SHARE * settings.tuning.utility_budget_s


def split_budget(settings: Settings, documents: int, docs_per_s: float, measured_s: float = 0.0,
                 label_free: int = 0) -> RunBudget:  # fmt: skip
    """run.budget_s split on this machine: the estimated non-LLM work first, then the LLM evaluation (at most
    run.llm_budget_s), then the search of knobs by the LLM utility on the ``label_free`` tasks no label sees (at most
    their configured seconds), then the feedback probe; without a whole-run budget (0) the LLM evaluation keeps
    run.llm_budget_s and neither the search nor the probe is limited (tuning_s = feedback_s = -1)."""
    embed = documents / max(docs_per_s, 1e-6)
    rest = rest_per_embed_s(settings) * embed
    cap = settings.run.llm_budget_s
    if settings.run.budget_s <= 0:
        return RunBudget(0.0, documents, docs_per_s, embed, rest, measured_s, cap, -1.0, -1.0)
    left = max(0.0, settings.run.budget_s - embed - rest - measured_s)
    llm = min(cap, left) if cap > 0 else left
    tuning = min(max(0.0, left - llm), label_free * utility_search_s(settings))
    return RunBudget(settings.run.budget_s, documents, docs_per_s, embed, rest, measured_s, llm,
                     max(0.0, left - llm - tuning), tuning)  # fmt: skip


def corpus_texts(settings: Settings) -> tuple[int, list[str]]:
    """(how many profile documents the configured tasks hold, the first EMBED_PROBE_TEXTS distinct texts)."""
    from prag_models.data.source import load_task_samples

    seen: set[tuple[str, str, str]] = set()
    texts: dict[str, None] = {}
    for task in settings.data.tasks:
        for split in load_task_samples(settings, task).values():
            for sample in split:
                for doc in sample.profile:
                    seen.add((task, sample.user_id, doc.doc_id))
                    if len(texts) < EMBED_PROBE_TEXTS:
                        texts.setdefault(doc.text)
    return len(seen), list(texts)


def _speed_key(settings: Settings) -> str:
    """What the embedder's measured speed depends on besides the machine: the embedder settings, the CPU."""
    return json.dumps([SPEED_VERSION, settings.embedder.model_dump(mode="json"), cpu_description()], sort_keys=True)


def embedder_speed(settings: Settings, texts: list[str], path: Path) -> tuple[float, float]:
    """(documents per second, seconds spent measuring: 0 when reused): the stored speed for the same embedder and
    CPU, else the embedder timed on the texts after a warm-up batch, stored at path."""
    key = _speed_key(settings)
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") == key:
            return float(stored["docs_per_s"]), 0.0
    except (OSError, ValueError, KeyError, TypeError):
        pass
    from prag_models.text.embedder import Embedder

    started = time.perf_counter()
    embedder = Embedder(settings.embedder)
    embedder.embed(texts[: settings.embedder.batch_size])  # warm-up: the first batch allocates
    t0 = time.perf_counter()
    embedder.embed(texts)
    docs_per_s = len(texts) / max(time.perf_counter() - t0, 1e-6)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"key": key, "docs_per_s": docs_per_s, "texts": len(texts)})
    return docs_per_s, time.perf_counter() - started
