"""What the ``champion`` alias of a registered model holds, said in the registry wherever the alias moves (the first
version, a promotion, a rollback): whether those weights are trained or the untrained initialisation.

A version is the **untrained initialisation** when it was registered at its initialisation (``training.skipped``: the
feedback probe stopped, no training step ran) or when its training did not beat the initialisation on validation
(``training.improved = false``: the kept weights are the initialisation). :func:`mark_champion` writes the version's
``training.state`` and the registered model's ``champion`` tag (short: ``v2 trained``, ``v1 untrained``, ``none``)
and ``champion.status`` (how it became champion). MLflow's registered-models list shows a model's first tags in the
order they were first set, and its Tags column holds about 24 characters at 1,280 px: the ``champion`` tag is set
first, when the model is created (``registry``), so that the list shows ``champion: v1 untrained`` unclipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: Registered-model tag saying how the champion became champion: a version that passed the promotion gate, one
#: promoted by override, a rollback, or the first version (issue 26/29).
CHAMPION_STATUS_TAG = "champion.status"
#: Registered-model tag saying whether the champion is trained: ``v<N> trained``, ``v<N> untrained`` or ``none``
#: (issue 50); the first tag of every registered model prag creates.
CHAMPION_TRAINING_TAG = "champion"
#: Version tag: ``trained`` or ``untrained initialisation``.
TRAINING_STATE_TAG = "training.state"
TRAINED, UNTRAINED = "trained", "untrained initialisation"
NO_CHAMPION = "none"


def untrained_reason(tags: Mapping[str, str]) -> str:
    """Why a version's weights are its untrained initialisation ("" = they are trained), from its tags."""
    if tags.get("training.skipped"):
        return "the feedback probe stopped: no training step ran"
    if tags.get("training.improved") == "false":
        return "training did not beat it on validation"
    return ""


def training_state(tags: Mapping[str, str]) -> str:
    """``trained`` or ``untrained initialisation``, from a version's tags."""
    return UNTRAINED if untrained_reason(tags) else TRAINED


def mark_champion(client: MlflowClient, name: str, version: int | None, status: str) -> str:
    """Say in the registry what ``name``'s champion alias now holds (``version``; None = no champion): the version's
    ``training.state``, the model's ``champion`` tag and its ``champion.status`` = ``status``. Returns the
    ``champion`` tag's value."""
    training = NO_CHAMPION
    if version is not None:
        state = training_state(client.get_model_version(name, str(version)).tags)
        client.set_model_version_tag(name, str(version), TRAINING_STATE_TAG, state)
        training = f"v{version} {'untrained' if state == UNTRAINED else 'trained'}"
    client.set_registered_model_tag(name, CHAMPION_TRAINING_TAG, training)
    client.set_registered_model_tag(name, CHAMPION_STATUS_TAG, status)
    return training
