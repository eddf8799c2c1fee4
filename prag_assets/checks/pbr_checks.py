"""Blocking checks of the retrieval_eval group (real-data PBR evaluation) and of the LaMP PBR retrieval option."""

from collections.abc import Callable

import dagster as dg

from prag_assets.assets import pbr_eval, pbr_lamp
from prag_assets.checks.lamp_checks import table_check
from prag_assets.partitions import DUCKDB_POOL
from prag_assets.resources.duckdb_file import DuckDBResource
from prag_assets.resources.settings import PragSettingsResource
from prag_models.config.settings import Settings
from prag_models.stages import pbr_lamp as pbr_lamp_rules
from prag_models.stages import pbr_tuning as pbr_tuning_rules
from prag_models.stages import real_data as rules

#: (connection, dataset, settings) -> problems of one dataset.
DatasetRule = Callable[[object, str, Settings], list[str]]


def dataset_check(
    asset: dg.AssetsDefinition, name: str, description: str, rule: DatasetRule
) -> dg.AssetChecksDefinition:
    """A blocking check running rule on every dataset of the retrieval_eval run."""

    @dg.asset_check(asset=asset, name=name, description=description, blocking=True, pool=DUCKDB_POOL)
    def _check(
        context: dg.AssetCheckExecutionContext, prag_settings: PragSettingsResource, duckdb: DuckDBResource
    ) -> dg.AssetCheckResult:
        settings = prag_settings.get()
        datasets = pbr_eval.run_datasets(context, settings)
        failures: list[str] = []
        with duckdb.connect() as con:
            for dataset in datasets:
                failures += [f"{dataset}: {p}" for p in rule(con, dataset, settings)]
        for f in failures:
            context.log.error(f"{asset.key.to_user_string()} check failed: {f}")
        return dg.AssetCheckResult(passed=not failures, metadata={
            "datasets": dg.MetadataValue.json(datasets),
            "failures": dg.MetadataValue.md("\n".join(f"- {f}" for f in failures) or "none"),
        })

    return _check


pbr_checks = [
    dataset_check(pbr_eval.personal_corpora, "corpora_valid", "Segments and questions non-empty, segment ids unique "
                  "per user, every gold id in the asking user's corpus.", rules.corpora_problems),
    dataset_check(pbr_eval.segment_embeddings, "embeddings_valid", "One finite unit vector per segment, from the "
                  "configured embedder.", rules.segment_embedding_problems),
    dataset_check(pbr_eval.query_expansions, "expansions_valid", "(question, method, source) unique; every expansion "
                  "method covers every question.", rules.expansion_problems),
    dataset_check(pbr_eval.pbr_tuned_settings, "tuned_values_in_space", "Every fold holds every PBR knob once, with a "
                  "value from the search space; the folds hold out every question exactly once.",
                  pbr_tuning_rules.tuned_problems),
    dataset_check(pbr_eval.retrieval_runs, "every_question_ranked", "Every question ranked by every method, only "
                  "with segments of the asking user's corpus, ranks 1..pbr.top_k.", rules.run_problems),
    dataset_check(pbr_eval.retrieval_evaluation, "metrics_in_unit_interval", "Every R@K / NDCG@K within [0, 1] "
                  "over at least one question; every method has an Overall score.", rules.evaluation_problems),
    table_check(pbr_lamp.pbr_lamp_retrievals, pbr_lamp.TABLE, "docs_from_own_profile", "Retrieved documents exist "
                "and come only from the asking user's own profile; every dev sample served (pbr: every LLM-evaluation "
                "sample).", pbr_lamp_rules.pbr_lamp_suite, pbr_lamp_rules.pbr_lamp_extra),
]
