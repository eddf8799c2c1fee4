"""prag's Dagster layer: assets, checks, sensors and resources over prag_models."""

import warnings

import dagster as dg

# Single-run backfills and partitioned checks are marked beta/preview; prag relies on them deliberately, so their
# warnings would only repeat on every load of the definitions.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
