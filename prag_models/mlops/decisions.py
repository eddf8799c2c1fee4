"""A champion/challenger decision of a task's CFRAG bundle (``mlops.promotion``) as a record: its ``model_promotions``
rows in DuckDB, its summary lines and its JSON metadata for Dagster."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    import duckdb

PROMOTIONS_TABLE = "model_promotions"
PROMOTIONS_DDL = (
    "task VARCHAR, action VARCHAR, registered_name VARCHAR, from_version BIGINT, to_version BIGINT, metric VARCHAR, "
    "challenger_value DOUBLE, champion_value DOUBLE, override BOOLEAN, actor VARCHAR, reason VARCHAR, "
    "decided_at TIMESTAMP, message VARCHAR, difference DOUBLE, ci_low DOUBLE, ci_high DOUBLE, n_samples BIGINT"
)
#: Columns added after the table's first release (an older home's table gets them on its next decision).
_ADDED_COLUMNS = ("difference DOUBLE", "ci_low DOUBLE", "ci_high DOUBLE", "n_samples BIGINT")
#: Heading of the decision paragraph at the end of a version's description (replaced by the next decision).
DECISION_HEADING = "**Promotion gate**"
#: Heading of a rollback's paragraph, after the gate's (which keeps the evidence the version was judged on).
ROLLBACK_HEADING = "**Rollback**"


def iso_utc(moment: datetime) -> str:
    """ISO-8601 UTC text of a naive UTC datetime."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PromotionDecision:
    """One promotion, refusal or rollback of a task's bundle; ``*_value`` are the metric the gate decided on (both
    means over the paired samples; the recorded primary metric without paired evidence), ``difference`` its
    challenger − champion with the 95 % interval ``ci_low``..``ci_high`` over ``n_samples`` paired samples.

    For a rollback, ``to_versions`` are the restored champion versions, ``challenger_value`` their recorded metric and
    ``champion_value`` the metric of the bundle that was champion until then.
    """

    task: str
    action: str  # promoted | refused | rolled_back
    promoted: bool
    metric: str
    higher_is_better: bool
    challenger_value: float | None
    champion_value: float | None
    override: bool
    actor: str
    reason: str
    decided_at: datetime  # UTC, naive
    message: str
    names: dict[str, str] = field(default_factory=dict)  # kind -> registered name
    from_versions: dict[str, int | None] = field(default_factory=dict)
    to_versions: dict[str, int | None] = field(default_factory=dict)
    difference: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_samples: int | None = None

    def rows(self) -> pd.DataFrame:
        """One ``model_promotions`` row per registered model of the bundle."""
        base = {
            "task": self.task,
            "action": self.action,
            "metric": self.metric,
            "challenger_value": self.challenger_value,
            "champion_value": self.champion_value,
            "override": self.override,
            "actor": self.actor,
            "reason": self.reason,
            "decided_at": self.decided_at,
            "message": self.message,
            "difference": self.difference,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n_samples": self.n_samples,
        }
        rows = [
            {**base, "registered_name": self.names[k], "from_version": self.from_versions.get(k),
             "to_version": self.to_versions.get(k)}
            for k in self.names
        ]  # fmt: skip
        columns = [c.split()[0] for c in PROMOTIONS_DDL.split(", ")]
        return pd.DataFrame(rows, columns=columns).astype(
            {"from_version": "Int64", "to_version": "Int64", "n_samples": "Int64", "difference": "float64",
             "ci_low": "float64", "ci_high": "float64"})  # fmt: skip

    def summary(self) -> str:
        """A few printable lines: the message, the versions per model, who/when/why."""
        lines = [f"{self.action}: {self.message}"]
        for kind, name in self.names.items():
            lines.append(f"  {name}: v{self.from_versions.get(kind)} -> v{self.to_versions.get(kind)}")
        if self.n_samples is not None:
            lines.append(f"  {self.metric}: challenger − champion {self.difference:+.4g}, 95 % CI "
                         f"[{self.ci_low:+.4g}, {self.ci_high:+.4g}], n={self.n_samples}")  # fmt: skip
        lines.append(
            f"  actor {self.actor}, at {iso_utc(self.decided_at)}, override {self.override}, reason: {self.reason}"
        )
        return "\n".join(lines)


def append_decision(con: duckdb.DuckDBPyConnection, decision: PromotionDecision) -> int:
    """Append a decision's rows to the DuckDB table ``model_promotions`` (created if missing); returns rows written."""
    frame = decision.rows()
    con.execute(f"CREATE TABLE IF NOT EXISTS {PROMOTIONS_TABLE} ({PROMOTIONS_DDL})")
    for column in _ADDED_COLUMNS:
        con.execute(f"ALTER TABLE {PROMOTIONS_TABLE} ADD COLUMN IF NOT EXISTS {column}")
    con.register("_prag_promotion", frame)
    try:
        cols = ", ".join(frame.columns)
        con.execute(f"INSERT INTO {PROMOTIONS_TABLE} ({cols}) SELECT {cols} FROM _prag_promotion")
    finally:
        con.unregister("_prag_promotion")
    return len(frame)


def decision_metadata(decision: PromotionDecision) -> dict[str, Any]:
    """A JSON-able summary of a decision (Dagster metadata, logs)."""
    return {
        "task": decision.task,
        "action": decision.action,
        "metric": decision.metric,
        "challenger_value": decision.challenger_value,
        "champion_value": decision.champion_value,
        "override": decision.override,
        "actor": decision.actor,
        "reason": decision.reason,
        "decided_at": iso_utc(decision.decided_at),
        "message": decision.message,
        "evidence": None if decision.n_samples is None else {
            "difference": round(decision.difference, 6), "ci_95": [round(decision.ci_low, 6),
            round(decision.ci_high, 6)], "n_samples": decision.n_samples},
        "versions": {decision.names[k]: [decision.from_versions.get(k), decision.to_versions.get(k)]
                     for k in decision.names},
    }  # fmt: skip


def describe_version(description: str, decision: PromotionDecision, is_to: bool) -> str:
    """A version's description with the decision as its last paragraph (a previous decision's paragraph replaced):
    what happened to this version, the figures, the 95 % interval and n the gate decided on, who and why. A rollback
    adds its own paragraph after the gate's, which keeps the evidence the version was last judged on."""
    heading = ROLLBACK_HEADING if decision.action == "rolled_back" else DECISION_HEADING
    base = description.split(f"\n\n{ROLLBACK_HEADING}", 1)[0]
    base = base.split(f"\n\n{DECISION_HEADING}", 1)[0] if heading == DECISION_HEADING else base
    base = base.rstrip()
    role = {("promoted", True): "promoted to champion", ("promoted", False): "replaced as champion",
            ("refused", True): "not promoted (the champion was kept)", ("refused", False): "kept as champion",
            ("rolled_back", True): "restored as champion by a rollback",
            ("rolled_back", False): "rolled back from champion"}[(decision.action, is_to)]  # fmt: skip
    lines = [f"{heading} ({iso_utc(decision.decided_at)}, {decision.actor}): this version was {role}."]
    if decision.n_samples is not None:
        lines.append(f"Evidence: {decision.metric}, challenger {decision.challenger_value:.4g} vs champion "
                     f"{decision.champion_value:.4g}; challenger − champion {decision.difference:+.4g}, 95 % CI "
                     f"[{decision.ci_low:+.4g}, {decision.ci_high:+.4g}], n={decision.n_samples} paired samples.")
    # a code span: the MLflow UI renders descriptions as Markdown, where "[a, b] (n=3)" reads as a link
    lines.append(f"Gate: `{decision.message}`")
    lines.append(f"Reason given: {decision.reason}" + (" (override)" if decision.override else ""))
    return (f"{base}\n\n" if base else "") + "\n".join(lines)
