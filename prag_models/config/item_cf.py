"""item_cf's settings (docs/methods.md §5.2): how the authors of an item's documents vote, and how deep it looks."""

from __future__ import annotations

from pydantic import Field

from prag_models.config.sources import Section


class ItemCfSettings(Section):
    """Item-based collaborative filtering: everyone's documents about the query's item, voted by their authors."""

    # An author's vote weighs exp(sharpness * cos(asker, author)) under clustering.user_similarity: 0 = every user
    # who may be shown counts once (the crowd's majority), large = the users most like the asker decide.
    sharpness: float = Field(4.0, ge=0.0)
    # Different texts read per query (by cosine, each text once, however many users wrote it): the closest names the
    # query's item; the others fill the ranking after the item's texts.
    shortlist: int = Field(64, ge=1)
