"""What a served request costs: the task's tables are read once when the model loads, never by a request, and a
known user's e_u and neighbours are a look-up (benchmarks/serving_latency.py measures the times)."""

from __future__ import annotations

import numpy as np
from test_mlflow_serving import TASK, graph  # noqa: F401 - the module's materialized LaMP-2 fixture

from prag_models.mlops import pyfunc, registry, serving


def test_requests_do_not_reread_the_task_tables(graph, monkeypatch) -> None:  # noqa: F811
    """Loading the champion reads the documents, e_u and similar users once; requests read nothing more (on the old
    code the first request read the whole document table), and the look-up equals serving.cfrag_user."""
    import mlflow

    settings, samples, _, _ = graph
    monkeypatch.setenv("MLFLOW_TRACKING_URI", settings.mlflow_uri)
    reads = []
    original = pyfunc.read_task_data
    monkeypatch.setattr(pyfunc, "read_task_data", lambda *a, **k: reads.append(a[1]) or original(*a, **k))
    model = mlflow.pyfunc.load_model(f"models:/{registry.registered_name('reranker', TASK)}@champion")
    assert reads == [TASK]  # read while loading
    request = samples.head(3)[["user_id", "query"]].assign(task=TASK)
    for _ in range(3):
        out = model.predict(request[["task", "user_id", "query"]])
        assert len(out) == 3 and all(len(ids) for ids in out["doc_ids"])
    assert reads == [TASK]  # and never again by a request
    data = model.unwrap_python_model().task_data()
    for user_id in request["user_id"]:
        slow = serving.cfrag_user(user_id, data.vectors, data.similar, settings)
        fast = data.user(user_id, settings, None)
        assert fast.neighbours == slow.neighbours and np.array_equal(fast.embedding, slow.embedding)
