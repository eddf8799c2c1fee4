"""benchmarks/verdict_calibration.py: false ships counted on worlds generated without collaboration, each family with
its Wilson interval; the sign-flip placebo reported only as a self-test of the test (docs/methods.md §6.6)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from statsmodels.stats.proportion import proportion_confint

from prag_models.data.demo_world import FAMILIES
from prag_models.evaluation.verdict import KEEP, SHIP

OWN = "own profile suffices"


@pytest.fixture(scope="module")
def calibration():
    """The benchmark script as a module."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "verdict_calibration.py"
    spec = importlib.util.spec_from_file_location("verdict_calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_family_is_calibrated_and_the_null_ones_are_generated(calibration) -> None:
    """Every demo family has a role; the false-ship families are generated worlds, not sign-flipped copies."""
    assert set(calibration.CAN_HELP) == set(FAMILIES)
    assert {f for f, helps in calibration.CAN_HELP.items() if not helps} == {"no_community", "alike_communities"}


def test_summary_gives_wilson_intervals_and_the_false_ship_goal(calibration) -> None:
    """Per family the worlds, ships, the (false-)ship rate and its Wilson interval; the goal for each null family."""
    rows = [{"family": "communities", "seed": s, "verdict": SHIP if s % 4 else KEEP, "seconds": 2.0} for s in range(20)]
    rows += [{"family": "no_community", "seed": s, "verdict": OWN, "seconds": 1.0} for s in range(80)]
    rows += [{"family": "no_community", "seed": 80, "verdict": "failed", "seconds": 1.0}]
    rows += [{"family": "alike_communities", "seed": s, "verdict": SHIP if s == 0 else KEEP, "seconds": 1.0}
             for s in range(40)]  # fmt: skip
    text = calibration.summarize(rows)
    low, high = proportion_confint(15, 20, method="wilson")
    assert f"| communities | yes | 20 | 15 | 0 | 5 | 0 | 0 | ship rate 0.750 | [{low:.3f}, {high:.3f}] | 2.0 |" in text
    low, high = proportion_confint(0, 80, method="wilson")
    assert f"| no_community | no | 80 | 0 | 80 | 0 | 0 | 1 | false-ship rate 0.000 | [0.000, {high:.3f}]" in text
    assert "≤ 5%) for no_community: met" in text and high <= 0.05
    low, high = proportion_confint(1, 40, method="wilson")
    row = f"| alike_communities | no | 40 | 1 | 0 | 39 | 0 | 0 | false-ship rate 0.025 | [{low:.3f}, {high:.3f}]"
    assert row in text
    assert "≤ 5%) for alike_communities: not met" in text


def test_sign_flip_placebo_is_reported_as_a_self_test_not_a_calibration(calibration) -> None:
    """The mirrored copies are the sign-flip test's own null: reported apart, named a self-test, never a family's
    false-ship rate or goal."""
    rows = [{"family": "communities", "seed": s, "verdict": SHIP, "seconds": 2.0, "self_test": [SHIP, KEEP, KEEP]}
            for s in range(2)]  # fmt: skip
    text = calibration.summarize(rows)
    table, _, self_test = text.partition("Sign-flip self-test")
    assert self_test and "not a calibration" in self_test and "placebo" not in text.lower()
    low, high = proportion_confint(2, 6, method="wilson")
    row = f"| communities sign-flip self-test | no | 6 | 2 | 0 | 4 | 0 | 0 | false-ship rate 0.333 | [{low:.3f}, "
    assert row in self_test
    assert "self-test" not in table and "goal" not in text
    assert "--self-test" in calibration.__doc__ and "placebo" not in calibration.__doc__.lower()
