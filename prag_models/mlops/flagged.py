"""A registered version flagged for retraining after an erasure (``privacy.needs_retraining``, set by `prag forget`)
is never served: the served pyfunc refuses to load it (and a loaded one refuses requests once the flag appears) and
`prag answer` refuses it, naming the versions and how to retrain (docs/privacy.md). Serving it would answer with a
model trained on the erased user's data: its encoder's document table holds vectors of the user's documents, its
retriever and reranker learned from feedback on them."""

from __future__ import annotations

from collections.abc import Iterable

from prag_models.mlops.registry import MlflowTarget, RegisteredVersion, make_client
from prag_models.privacy.forget import ERASURES_TAG, needs_retraining


class FlaggedVersionError(LookupError):
    """A version trained on data of a user erased since was asked to serve."""


def refuse_flagged(target: MlflowTarget, entries: Iterable[RegisteredVersion], task: str) -> None:
    """Raise FlaggedVersionError when any of the versions is flagged for retraining after an erasure."""
    client = make_client(target)
    flagged = []
    for entry in entries:
        tags = client.get_model_version(entry.name, str(entry.version)).tags
        if needs_retraining(tags):
            flagged.append(f"{entry.name} v{entry.version} (erasure {tags.get(ERASURES_TAG) or 'unknown'})")
    if flagged:
        raise FlaggedVersionError(
            f"{', '.join(flagged)}: trained on data of a user erased since (`prag forget`, tag "
            "privacy.needs_retraining): a flagged version is never served. Retrain: `prag materialize` registers new "
            f"versions of the {task} models without the user, then `prag promote --task {task}` makes them champion"
        )
