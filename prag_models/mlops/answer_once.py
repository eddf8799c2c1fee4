"""One personalized answer for `prag answer`: the task's documents and the user's neighbours from DuckDB, the champion
CFRAG models from the MLflow registry (or ClusterRAG's clusters, or item_cf's user vectors and tuned knobs), then
prag_models.mlops.serving answers."""

from __future__ import annotations

from prag_models.config.settings import Settings
from prag_models.mlops import serving


def load_model_uri(target, uri: str):  # noqa: ANN001, ANN201 - (model, registry entry)
    """A CFRAG model from a ``models:/<name>@<alias>`` or ``models:/<name>/<version>`` URI, and its registry entry.

    The URI is resolved with the target's explicit client (mlflow resolves ``models:/`` only against a global
    registry URI, which prag never sets), then the version's folder is loaded from safetensors.
    """
    from prag_models.mlops.registry import load_registered

    ref = uri.removeprefix("models:/")
    if "@" in ref:
        name, alias = ref.split("@", 1)
        return load_registered(target, name, alias=alias)
    name, version = ref.rsplit("/", 1)
    return load_registered(target, name, version=int(version))


def answer_once(con, settings: Settings, task: str, user_id: str, method: str, text: str) -> serving.ServedAnswer:  # noqa: ANN001
    """Load the tables and champion models one answer needs and answer once (`prag answer`)."""
    from prag_models.data.tasks import extract_query
    from prag_models.llm.factory import make_generator
    from prag_models.mlops.promotion import mlflow_target
    from prag_models.mlops.registry import CHAMPION, model_aliases, registered_name
    from prag_models.storage.store import read_rows
    from prag_models.text.embedder import load_embedder, query_embedder
    from prag_models.users.incremental import reference_clustering

    docs = serving.read_task_documents(con, task, settings.privacy.default_share)
    documents = serving.task_documents(task, docs)
    embedder = query_embedder(settings.embedder, set(docs["model_id"]), task)  # the model and its backend
    query_vector = load_embedder(embedder).embed([extract_query(task, text)])[0]
    models, uris = {}, {"embedder": settings.embedder.model}
    if method == "cfrag":
        from prag_models.methods.cfrag.tuning import tuned_cfrag_settings
        from prag_models.mlops.flagged import refuse_flagged
        from prag_models.mlops.registry import get_version

        settings = tuned_cfrag_settings(con, task, settings)  # m and the pool per user as evaluated
        target = mlflow_target(settings)
        name, version = con.execute(
            "SELECT registered_name, version FROM cfrag_models WHERE task = ? AND kind = 'user_encoder'", [task]
        ).fetchone()
        serving_versions = [get_version(target, registered_name(kind, task), alias=CHAMPION)
                            for kind in ("retriever", "reranker")]  # fmt: skip
        refuse_flagged(target, [*serving_versions, get_version(target, name, int(version))], task)  # erasures
        for kind in ("retriever", "reranker"):
            uri = f"models:/{registered_name(kind, task)}@{CHAMPION}"
            models[kind], entry = load_model_uri(target, uri)
            uris[kind] = f"{uri} (version {entry.version})"
        vectors = read_rows(con, "cfrag_user_embeddings", {"task": task})
        champion = model_aliases(target, name).get(CHAMPION)
        uris["user_encoder"] = f"models:/{name}/{version} made the stored e_u (champion: version {champion})"
        encoder = None
        if user_id not in set(vectors["user_id"]):  # cold start: the encoder of the stored e_u
            encoder, _ = load_model_uri(target, f"models:/{name}/{version}")
        similar = read_rows(con, "cfrag_similar_users", {"task": task})
        user = serving.cfrag_user(user_id, vectors, similar, settings, encoder)
    elif method == "item_cf":  # the tuned knobs and the user vectors the retrieval stage used (as the pyfunc reads)
        from prag_models.mlops.served_item_cf import item_cf_inputs

        settings, models["user_vectors"] = item_cf_inputs(con, task, settings, documents.index.vectors.shape[1])
        user = serving.item_cf_user(user_id, models["user_vectors"], settings.clustering.user_similarity)
    else:
        clusters = read_rows(con, "user_clusters", {"task": task})
        reference = None if user_id in set(clusters["user_id"]) else reference_clustering(con, task)[1]
        user = serving.clusterrag_user(
            user_id,
            query_vector,
            read_rows(con, "similar_users", {"task": task}),
            clusters,
            read_rows(con, "user_embeddings", {"task": task}),
            reference,
            settings,
        )
    generator = make_generator(settings.generator)
    try:
        return serving.answer(
            task, method, text, user, documents, query_vector, settings, generator, con, models, uris
        )
    finally:
        generator.close()
