"""`prag forget` on LaMP-shaped inputs (issue 26): every LaMP-2 input starts with the task's fixed template, so
matching cached prompts by a text prefix erases every user's prompts. Cache entries are matched by their provenance
(the users whose data the prompt shows, issue 51) and by ids (the generations rows of the user's samples, and those
whose retrieval showed the user's documents), never by text."""

from __future__ import annotations

import duckdb
import pandas as pd

from prag_models.data.tasks import INPUT_TEMPLATES
from prag_models.generation.prompts import build_prompt
from prag_models.llm.cache import prompt_hash
from prag_models.privacy.forget import forget

TASK = "LaMP-2"


def _input(description: str) -> str:
    return INPUT_TEMPLATES[TASK].format(x=description)


def _pbr(doc: str, query: str) -> str:
    """A prompt in the layout of PBR's query expansion (methods/pbr.py)."""
    return (f"Answer the question below by reasoning step by step.\n\nPast dialogue of the user:\n'description': "
            f"{doc} 'tag': comedy\n\nQuestion:\n{query}\n\nStep-by-step answer:\n")


def _store(path) -> tuple[duckdb.DuckDBPyConnection, dict[str, str]]:
    """Users a (to erase), b and c; each asks one question; b's prompt shows a's document (truncated, so only its
    generations row and the retrieval row tie it to a), c's prompt shows a's document whole, and the served answer
    of a (`prag answer`, no generations row) shows a's own question."""
    inputs = {u: _input(f"a film about {u}'s {w} and its long shadow") for u, w in
              (("a", "heist"), ("b", "garden"), ("c", "ocean"))}  # fmt: skip
    docs = {"a": "a secret diary of the heist crew, kept in a shoebox", "b": "a garden party", "c": "ocean waves"}
    queries = {u: t.split("description: ", 1)[1] for u, t in inputs.items()}
    prompts = {
        "zs-a": build_prompt(TASK, inputs["a"], []),
        "zs-b": build_prompt(TASK, inputs["b"], []),
        "zs-c": build_prompt(TASK, inputs["c"], []),
        "b-shows-a-truncated": build_prompt(TASK, inputs["b"], [docs["b"], docs["a"][:20]]),
        "c-shows-a-whole": build_prompt(TASK, inputs["c"], [docs["c"], docs["a"]]),
        "c-own": build_prompt(TASK, inputs["c"], [docs["c"]]),
        "served-a": build_prompt(TASK, inputs["a"], [docs["a"]]),
        "pbr-a": _pbr(docs["a"], queries["a"]),  # PBR's expansion prompt: its own layout, the question alone
        "pbr-b": _pbr(docs["b"], queries["b"]),
    }
    # whose data each prompt shows (the cache's provenance)
    users = {"zs-a": "a", "zs-b": "b", "zs-c": "c", "b-shows-a-truncated": "ab", "c-shows-a-whole": "ac",
             "c-own": "c", "served-a": "a", "pbr-a": "a", "pbr-b": "b"}  # fmt: skip
    gens = [("zero_shot", "s-a", "a", "zs-a"), ("zero_shot", "s-b", "b", "zs-b"), ("zero_shot", "s-c", "c", "zs-c"),
            ("m", "s-b", "b", "b-shows-a-truncated"), ("m", "s-c", "c", "c-own")]  # fmt: skip
    frames = {
        "lamp_samples": pd.DataFrame({"task": TASK, "split": "dev", "sample_id": ["s-a", "s-b", "s-c"],
                                      "user_id": ["a", "b", "c"], "input": [inputs[u] for u in "abc"],
                                      "query": [queries[u] for u in "abc"]}),
        "profile_documents": pd.DataFrame({"task": TASK, "user_id": list("abc"), "doc_id": ["da", "db", "dc"],
                                           "text": [docs[u] for u in "abc"], "fields_json": "{}",
                                           "content_hash": ["h-a", "h-b", "h-c"]}),
        "clusterrag_retrievals": pd.DataFrame({"task": TASK, "method": "m", "sample_id": ["s-b", "s-b", "s-c"],
                                               "user_id": ["b", "b", "c"], "doc_id": ["db", "da", "dc"],
                                               "source_user_id": ["b", "a", "c"], "rank": [1, 2, 1]}),
        "generations": pd.DataFrame([(TASK, m, s, u, "g", prompt_hash(prompts[p])) for m, s, u, p in gens],
                                    columns=["task", "method", "sample_id", "user_id", "generator_id",
                                             "prompt_hash"]),
        "generation_cache": pd.DataFrame({"generator_id": "g", "prompt_hash": [prompt_hash(p) for p in
                                                                                prompts.values()],
                                          "max_new_tokens": 8, "prompt": list(prompts.values()), "output": "o",
                                          "users": [list(users[n]) for n in prompts]}),
    }  # fmt: skip
    con = duckdb.connect(str(path))
    for name, frame in frames.items():
        con.register("_f", frame)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _f")
        con.unregister("_f")
    return con, {prompt_hash(p): name for name, p in prompts.items()}


def test_forget_matches_cached_prompts_by_provenance_and_ids_not_the_template(tmp_path) -> None:
    con, names = _store(tmp_path / "t.duckdb")
    assert len({p[:48] for (p,) in con.execute("SELECT input FROM lamp_samples").fetchall()}) == 1  # the template
    erasure = forget(con, "a", TASK)
    kept = sorted(names[h] for (h,) in con.execute("SELECT prompt_hash FROM generation_cache").fetchall())
    assert kept == ["c-own", "pbr-b", "zs-b", "zs-c"]
    assert erasure.deleted == {"clusterrag_retrievals": 1, "generation_cache": 5, "generations": 2,
                               "lamp_samples": 1, "profile_documents": 1}  # fmt: skip
    assert erasure.rows_deleted == 10
