"""The consent-cost scenario of the retrieval evaluation (docs/privacy.md "What consent costs"): a seeded share of the
users opted out, and ClusterRAG's user side rebuilt as the graph builds it for users who withdrew consent — z_u,
the user clusters and the neighbours computed without the opted-out users' documents (``users.user_embedding_rows``,
``methods.knobs.UserSpace``) — so that a ``<method>@consent<percent>`` row differs from its full-consent row only by
who shares. The retrieval stage gives those rows the method's tuned knobs, as the full-consent row has them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from prag_models.config.settings import Settings
from prag_models.evaluation.tuning import read_tuned
from prag_models.methods.knobs import UserSpace, with_knobs
from prag_models.methods.profiles import ProfileIndex
from prag_models.privacy.rules import consent_cost_opted_out, opted_out_users
from prag_models.stages.users import user_embedding_rows

CONSENT_MARK = "@consent"


def consent_suffix(settings: Settings) -> str:
    """The method-name suffix of the consent-cost rows: ``@consent<percent still sharing>``."""
    return f"{CONSENT_MARK}{round(100 * (1 - settings.privacy.consent_cost_share))}"


def consent_scenario(index: ProfileIndex, settings: Settings) -> tuple[ProfileIndex, str, list[str]] | None:
    """The consent-cost scenario: the index with a seeded ``privacy.consent_cost_share`` of its users opted out, the
    method-name suffix and the opted-out users (sorted); None when the share is 0."""
    p = settings.privacy
    if p.consent_cost_share <= 0:
        return None
    out = sorted(opted_out_users(index.users, p.consent_cost_share, p.consent_cost_seed))
    return index.with_opted_out(out), consent_suffix(settings), out


def consent_space(con, task: str, settings: Settings, opted_out: Collection[str], dim: int | None = None) -> UserSpace:
    """The task's users as the graph would place them had ``opted_out`` withdrawn consent: z_u without their
    documents (a user left without shareable documents gets the cold-start rule), clusters fitted afresh on those
    vectors, and no taste vector shaped by their documents."""
    frame, _ = user_embedding_rows(con, task, settings.privacy.default_share, withheld=opted_out)
    users = frame.select(["user_id", "embedding"])
    return UserSpace(con, task, settings, dim, users=users, withheld=opted_out)


def task_opted_out(con, task: str, settings: Settings) -> list[str]:
    """The users the task's consent-cost rows opt out (``privacy.rules.consent_cost_opted_out``)."""
    p = settings.privacy
    return consent_cost_opted_out(con, task, p.consent_cost_share, p.consent_cost_seed)


@dataclass
class ConsentRules:
    """Whom a consent-cost row may draw documents from: the opted-out users (never another user's source), per
    ClusterRAG method each user's neighbours (tuned ones for a tuned method), and clusterrag_community's pool."""

    opted_out: set[str]
    neighbours: dict[str, dict[str, set[str]]]
    community_top_n: int
    community_groups: dict[str, int]


def consent_check_rules(con, task: str, settings: Settings) -> ConsentRules:
    """The consent scenario's rules for the retrieval check, rebuilt as the retrieval stage builds the rows."""
    out = task_opted_out(con, task, settings)
    space = consent_space(con, task, settings, out)
    tuned = read_tuned(con, task) if settings.tuning.enabled else {}
    chosen = {m: with_knobs(settings, v) for m, v in tuned.items()}
    plain = {u: set(v) for u, v in space.neighbours(settings).items()}
    neighbours = {m: plain for m in ("clusterrag_hybrid", "clusterrag_two_stage", "clusterrag_collaborative")}
    if "clusterrag_collaborative" in chosen:
        neighbours["clusterrag_collaborative"] = {
            u: set(v) for u, v in space.neighbours(chosen["clusterrag_collaborative"]).items()
        }
    community = chosen.get("clusterrag_community", settings)
    return ConsentRules(set(out), neighbours, int(community.clustering.community_top_n), space.groups(community))
