"""Privacy settings (docs/privacy.md): the default sharing consent and the consent-cost rows of the evaluation."""

from __future__ import annotations

from prag_models.config.sources import Section


class PrivacySettings(Section):
    """Who may be shared by default, and how the evaluation prices consent (docs/privacy.md)."""

    #: A user without a stated consent (no ``share`` field, not in sharing.json) shares documents when True.
    default_share: bool = True
    #: Share of the users opted out (seeded) in the consent-cost rows of the retrieval evaluation; 0 turns them off.
    consent_cost_share: float = 0.5
    consent_cost_seed: int = 0
    #: Collaborative methods that get a ``<method>@consent<percent sharing>`` row.
    consent_cost_methods: tuple[str, ...] = (
        "dense_global",
        "clusterrag_collaborative",
        "clusterrag_hybrid",
        "clusterrag_two_stage",
        "clusterrag_community",
        "cfrag",
        "item_cf",
    )
