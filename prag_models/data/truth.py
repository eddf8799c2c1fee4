"""What is known to be right for a LaMP sample, without an LLM: the relevant documents where the data records them
(the demo does), and each profile document's label against the sample's gold output (label-hit, docs/methods.md §5).

Both the retrieval evaluation (dev samples) and CFRAG's model selection (held-out training samples) read it here.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import pyarrow as pa

from prag_models.data.tasks import lamp1_references
from prag_models.storage.store import table_exists

#: The profile field that is a document's label, per task with label-hit@k (LaMP-1: the paper's title).
LABEL_FIELDS: dict[str, str] = {"LaMP-1": "title", "LaMP-2": "tag", "LaMP-3": "score"}


def document_label(task: str, fields: Mapping[str, object]) -> str:
    """A profile document's label for label-hit@k (LaMP-2 tag, LaMP-3 score, LaMP-1 title), stripped."""
    return str(fields.get(LABEL_FIELDS[task], "")).strip()


def gold_label(task: str, input_text: str, gold: str) -> str | None:
    """The gold in the same terms as document_label: the chosen reference's title for LaMP-1 (None if unparseable)."""
    gold = str(gold).strip()
    if task != "LaMP-1":
        return gold
    refs = lamp1_references(input_text)
    choice = {"[1]": 0, "[2]": 1}.get(gold)
    return refs[choice].strip() if refs and choice is not None else None


@dataclass(frozen=True)
class Truth:
    """A task's truth for one split: relevant docs per sample (None without relevance labels), each document's label
    (None for tasks without labels) and each sample's gold in the labels' terms."""

    relevant: dict[str, set[str]] | None
    labels: dict[str, str] | None
    golds: dict[str, str]

    def gain(self, sample_id: str, doc_id: str) -> float | None:
        """1.0 if the document is right for the sample, 0.0 if not, None when nothing is known."""
        if self.relevant is not None:
            return float(doc_id in self.relevant.get(sample_id, set()))
        gold = self.golds.get(sample_id)
        if self.labels is None or gold is None:
            return None
        return float(self.labels.get(doc_id) == gold)


def load_truth(con, task: str, split: str, doc_ids: Collection[str] | None = None) -> Truth:
    """The truth of a task's samples of one split (``dev`` for the evaluation, ``train`` for model selection); the
    labels of the given documents only (e.g. those some method retrieved), of every document when None."""
    samples = con.execute(
        "SELECT sample_id, input, gold FROM lamp_samples WHERE task = ? AND split = ?", [task, split]
    ).fetchall()
    golds = {str(s): gold_label(task, str(text), str(g)) for s, text, g in samples}
    relevant: dict[str, set[str]] | None = None
    if table_exists(con, "relevance_labels"):
        wanted = set(golds)
        pairs = con.execute("SELECT sample_id, doc_id FROM relevance_labels WHERE task = ?", [task]).fetchall()
        if pairs:
            relevant = {}
            for sample, doc in pairs:
                if str(sample) in wanted:
                    relevant.setdefault(str(sample), set()).add(str(doc))
    labels = None
    if task in LABEL_FIELDS:
        sql, params = "SELECT doc_id, fields_json FROM profile_documents WHERE task = ?", [task]
        if doc_ids is not None:
            con.register("_truth_docs", pa.table({"doc_id": pa.array(sorted(set(doc_ids)), pa.string())}))
            sql += " AND doc_id IN (SELECT doc_id FROM _truth_docs)"
        try:
            rows = con.execute(sql, params).fetchall()
        finally:
            if doc_ids is not None:
                con.unregister("_truth_docs")
        labels = {str(d): document_label(task, json.loads(f)) for d, f in rows}
    return Truth(relevant, labels, {s: g for s, g in golds.items() if g is not None})
