"""PBR's knobs tuned per real dataset (docs/methods.md §4.7): the rows of table pbr_tuned_settings, and the settings
each question is ranked with (those tuned without its fold)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from prag_models.config.settings import PbrSettings
from prag_models.methods.pbr_eval import EmbeddingCache, expansion_vectors
from prag_models.methods.pbr_knobs import ALL_FOLDS, PBR_KNOB_SPACE, TUNED_COLUMNS, PbrVectors, fold_of, with_pbr_knobs
from prag_models.stages.real_data import read_corpus
from prag_models.storage.store import read_rows, table_exists

TABLE = "pbr_tuned_settings"
SCHEMA = ("dataset VARCHAR, fold VARCHAR, knob VARCHAR, value VARCHAR, default_value VARCHAR, score DOUBLE, "
          "default_score DOUBLE, metric VARCHAR, n_trials BIGINT, n_questions BIGINT, held_out BIGINT")  # fmt: skip


def ensure_tuned_table(con) -> None:  # noqa: ANN001
    """Create pbr_tuned_settings with its schema."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} ({SCHEMA})")


def pbr_vectors(questions: list, segments: dict, prf: dict, cache: EmbeddingCache) -> PbrVectors | None:
    """A dataset's questions, segment vectors and P-PRF vectors; None when some question has no P-PRF expansion
    (PBR does not run there)."""
    if not questions or any(q.q_id not in prf for q in questions):
        return None
    users = list(dict.fromkeys(q.user for q in questions))
    return PbrVectors(
        questions=list(questions),
        docs={u: cache([s.text for s in segments[u]]) for u in users},
        ids={u: [s.segment_id for s in segments[u]] for u in users},
        query={q.q_id: cache([q.question])[0] for q in questions},
        prf={q.q_id: expansion_vectors(prf[q.q_id], cache, cache.dim) for q in questions},
    )


def tuned_per_question(con, dataset: str, pbr: PbrSettings, questions: list) -> dict[str, PbrSettings] | None:  # noqa: ANN001
    """q_id -> the PBR settings tuned without the question's fold (pbr: the dataset's settings); None when the
    dataset has no tuned rows. The folds are recomputed as the tuning made them; a table whose folds differ
    (pbr.tuning_folds changed since) is refused."""
    if not table_exists(con, TABLE):
        return None
    rows = read_rows(con, TABLE, {"dataset": dataset})
    rows = rows[rows["fold"] != ALL_FOLDS]
    if rows.empty:
        return None
    fold = fold_of(questions, pbr.tuning_folds)
    folds = {str(f) for f in fold.values()}
    if folds != set(rows["fold"]):
        raise ValueError(f"{dataset}: {TABLE} has folds {sorted(set(rows['fold']))}, the questions give "
                         f"{sorted(folds)}: materialize pbr_tuned_settings again")  # fmt: skip
    settings = {f: with_pbr_knobs(pbr, {r.knob: _typed(r.knob, r.value) for r in g.itertuples()})
                for f, g in rows.groupby("fold")}  # fmt: skip
    return {q.q_id: settings[str(fold[q.q_id])] for q in questions}


def _typed(knob: str, text: str) -> Any:
    """A stored knob value back in its type (the type of the search space's values)."""
    return type(PBR_KNOB_SPACE[knob][0])(float(text)) if knob in PBR_KNOB_SPACE else text


def empty_rows() -> pd.DataFrame:
    """No tuned rows (a dataset PBR does not run on)."""
    return pd.DataFrame(columns=TUNED_COLUMNS)


def tuned_problems(con, dataset: str, settings: Any) -> list[str]:  # noqa: ANN001
    """Every fold holds every knob once, with a value from the search space; the folds are those of the questions
    (plus 'all') and hold out every question exactly once. A dataset without tuned rows has nothing to check."""
    rows = read_rows(con, TABLE, {"dataset": dataset}) if table_exists(con, TABLE) else empty_rows()
    if rows.empty:
        return []
    problems = []
    for fold, group in rows.groupby("fold"):
        if sorted(group["knob"]) != sorted(PBR_KNOB_SPACE):
            problems.append(f"fold {fold}: knobs {sorted(group['knob'])}, expected {sorted(PBR_KNOB_SPACE)}")
        outside = [f"{r.knob}={r.value}" for r in group.itertuples()
                   if r.knob in PBR_KNOB_SPACE and _typed(r.knob, r.value) not in PBR_KNOB_SPACE[r.knob]]  # fmt: skip
        problems += [f"fold {fold}: {v} is outside the search space" for v in outside]
    questions, _ = read_corpus(con, dataset)
    expected = {str(f) for f in fold_of(questions, settings.pbr.tuning_folds).values()} | {ALL_FOLDS}
    if set(rows["fold"]) != expected:
        problems.append(f"folds {sorted(set(rows['fold']))}, the questions give {sorted(expected)}")
    held = int(rows.drop_duplicates("fold")["held_out"].sum())
    if held != len(questions):
        problems.append(f"{held} questions held out over the folds, the dataset has {len(questions)}")
    return problems
