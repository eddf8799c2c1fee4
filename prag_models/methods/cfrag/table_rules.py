"""Data-quality rules of the CFRAG tables (docs/methods.md §2): user vectors, neighbour lists, the provenance of
retrieved documents and the feedback labels. The asset checks (prag_assets/checks/cfrag_checks.py) run them."""

from __future__ import annotations

import pandas as pd

from prag_models.config.settings import Settings
from prag_models.methods.cfrag import feedback_labels, tables, variants
from prag_models.methods.cfrag.tuning import DEFAULT_ROW, tuned_cfrag_settings
from prag_models.methods.cfrag.variants import CHAMPION_METHOD
from prag_models.privacy.rules import consent_cost_opted_out, unshareable_retrievals
from prag_models.storage.store import column_to_matrix, read_rows, table_exists
from prag_models.storage.validation import between, matrix_problems, min_rows, not_null, unique, validate_frame


def user_vectors_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Finite vectors of one dimension; every user with a sample has one."""
    problems = matrix_problems(column_to_matrix(df["embedding"].tolist()))
    needed = {u for (u,) in con.execute("SELECT DISTINCT user_id FROM lamp_samples WHERE task = ?", [task]).fetchall()}
    missing = needed - set(df["user_id"])
    return problems + ([f"{len(missing)} users have no CFRAG embedding, e.g. {sorted(missing)[:3]}"] if missing else [])


def tuned_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """One row per CFRAG knob, each value inside the search space and the chosen score not below the default's."""
    import json

    from prag_models.methods.knobs import CFRAG_KNOB_SPACE

    problems = []
    if set(df["knob"]) != set(CFRAG_KNOB_SPACE):
        problems.append(f"knobs {sorted(set(df['knob']))} != {sorted(CFRAG_KNOB_SPACE)}")
    for r in df.itertuples(index=False):
        if r.knob in CFRAG_KNOB_SPACE and json.loads(r.value) not in CFRAG_KNOB_SPACE[r.knob]:
            problems.append(f"{r.knob} = {r.value} is outside its search space {CFRAG_KNOB_SPACE[r.knob]}")
    if (df["score"] < df["default_score"]).any():
        problems.append("a chosen score is below the default's: the search must never choose a worse setting")
    return problems


def neighbours_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """min(m, n) neighbours per user; with include_self the user first and nowhere else."""
    settings = tuned_cfrag_settings(con, task, settings)
    n_users = con.execute("SELECT count(*) FROM cfrag_user_embeddings WHERE task = ?", [task]).fetchone()[0]
    m, self_first = settings.cfrag.top_m_users, settings.cfrag.include_self
    width = min(m, n_users) if self_first else min(m, max(n_users - 1, 0))
    counts = df.groupby("user_id").size()
    problems = []
    if len(counts) != n_users or (counts != width).any():
        problems.append(f"expected {width} neighbours for each of {n_users} users, got {counts.describe().to_dict()}")
    if len(df) and df["rank"].max() > m:
        problems.append(f"ranks up to {df['rank'].max()} with the task's m = {m}")
    firsts = df[df["rank"] == 1]
    if self_first and (firsts["user_id"] != firsts["neighbour_id"]).any():
        problems.append("include_self is set but some users are not their own first neighbour")
    others = df[df["rank"] > 1] if self_first else df
    if (others["user_id"] == others["neighbour_id"]).any():
        problems.append("a user appears as its own neighbour beyond rank 1")
    return problems


def retrieval_extra(con, task: str, df: pd.DataFrame, settings: Settings) -> list[str]:
    """Retrieved docs exist and come from the users the method may use (``cfrag@default``: the users of the untuned
    knobs; ``cfrag@champion``: only the sharing rule, its similar users come from the champion's e_u); every CFRAG
    method present."""
    tuned = tuned_cfrag_settings(con, task, settings)
    problems = []
    missing = con.execute(
        "SELECT count(*) FROM cfrag_retrievals r LEFT JOIN profile_documents p ON p.task = r.task "
        "AND p.user_id = r.source_user_id AND p.doc_id = r.doc_id WHERE r.task = ? AND p.doc_id IS NULL",
        [task],
    ).fetchone()[0]
    if missing:
        problems.append(f"{missing} retrieved documents do not exist in profile_documents")
    allowed = {
        "encoder": tables.neighbour_lists(con, task),
        "mean": tables.mean_embedding_neighbours(con, task, tuned),
        "default": tables.similar_user_lists(con, task, settings) if tuned is not settings else {},
    }
    users_of = {v.method: v.users for v in variants.VARIANTS} | {DEFAULT_ROW: "default"}
    p = settings.privacy
    opted_out = set(consent_cost_opted_out(con, task, p.consent_cost_share, p.consent_cost_seed))
    bad = []
    for r in df.itertuples(index=False):
        if r.method == CHAMPION_METHOD:  # neighbours by the champion's own e_u (not stored): the sharing rule below
            continue  # (unshareable_retrievals) still checks its every document
        kind = users_of.get(r.method)
        if kind is None and "@consent" in r.method:  # the consent scenario ranks its own similar users (with the
            kind = users_of.get(r.method.partition("@")[0])  # encoder): any user who still shares, or the user itself
            ok = r.source_user_id == r.user_id or r.source_user_id not in opted_out
        else:
            ok = (
                r.source_user_id == r.user_id
                if kind == "own"
                else r.source_user_id in allowed.get(kind, {}).get(r.user_id, [r.user_id])
            )
        if kind is None or not ok:
            bad.append(f"{r.method}/{r.sample_id}: doc {r.doc_id} of user {r.source_user_id}")
    if bad:
        problems.append(f"{len(bad)} documents come from users the method may not use, e.g. {bad[:3]}")
    problems += unshareable_retrievals(con, task, df, settings.privacy.default_share)  # docs/privacy.md
    expected = set(variants.CFRAG_METHODS)
    if {m.partition("@")[0] for m in df["method"]} != expected:
        problems.append(f"methods {sorted(set(df['method']))} != {sorted(expected)}")
    return problems


def _probe_not_measured(con, task: str, generator_id: str, version: str) -> str:
    """The probe's reason when the time budget could not pay it for this generator and prompt version, else ""."""
    from prag_models.methods.cfrag.feedback_probe import NOT_MEASURED, PROBE_TABLE

    if not table_exists(con, PROBE_TABLE):
        return ""
    rows = read_rows(con, PROBE_TABLE, {"task": task, "generator_id": generator_id, "prompt_version": version})
    rows = rows[rows["decision"] == NOT_MEASURED]
    return str(rows["reason"].iloc[0]) if len(rows) else ""


def feedback_result(con, task: str, settings: Settings, generator_id: str) -> tuple[list[str], list[str], dict]:
    """(errors, warnings, info) of a task's labels: schema, key, score range; degenerate samples of this generator."""
    exists = table_exists(con, "feedback_labels")
    df = read_rows(con, "feedback_labels", {"task": task}) if exists else pd.DataFrame()
    version = feedback_labels.feedback_prompt_version(task, settings)
    if len(df):  # labels of other generators / prompt versions / signals are kept for re-use, not judged here
        df = df[(df["generator_id"] == generator_id) & (df["prompt_version"] == version)]
    low, high = feedback_labels.score_range(task, settings.cfrag.feedback_signal)
    unpaid = _probe_not_measured(con, task, generator_id, version)  # the budget paid no label: none required
    if unpaid and df.empty:
        return [], [], {"labels": 0, "probe": unpaid}
    suite = [
        *not_null("sample_id", "doc_id", "source_user_id", "generator_id", "prompt_version", "score"),
        unique("sample_id", "doc_id", "source_user_id", "generator_id", "prompt_version"),
        between("score", None if low == float("-inf") else low, high),
        *([] if unpaid else [min_rows(1)]),
    ]
    _, errors = validate_frame(f"feedback_labels_{task.replace('-', '')}", df, suite)
    warnings: list[str] = []
    info: dict = {"labels": len(df), **({"probe": unpaid} if unpaid else {})}
    if len(df):
        degenerate, n = feedback_labels.degenerate_samples(df)
        info |= {"generator": generator_id, "prompt_version": version, "samples": n, "degenerate_samples": degenerate}
        info["degenerate_share"] = round(degenerate / n, 3) if n else None
        if not n:
            errors.append(f"no labels for {generator_id} / {version}")
        elif degenerate > n / 2:
            warnings.append(
                f"{degenerate} of {n} samples have identical scores for every candidate: most labels carry no signal "
                "(cfrag.feedback_signal = 'gold_loglik' gives labels that differ even when the task metric ties)"
            )
    return errors, warnings, info
