"""The Great Expectations suites behind the blocking checks (prag_models.storage.validation)."""

import pandas as pd
import pytest

from prag_models.storage import validation


def _held(context) -> tuple[int, int, int]:
    return len(context.suites.all()), len(context.validation_definitions.all()), len(context.data_sources.all())


def test_failures_name_the_expectation_and_the_context_keeps_nothing() -> None:
    """A passing and a failing suite, then one whose expectation cannot be built: results as expected, and the
    process-wide context holds no suite, definition or datasource afterwards (it kept every one: each later
    validation listed and copied all of them, 0.05 s a call growing to 0.1 s after 400)."""
    frame = pd.DataFrame({"user_id": ["u1", "u2", None], "score": [0.1, 0.5, 2.0]})
    context = validation._context()
    before = _held(context)
    assert validation.validate_frame("ok", frame.iloc[:2], validation.not_null("user_id")) == (True, [])
    ok, failures = validation.validate_frame("bad", frame, [*validation.not_null("user_id"),
                                                            validation.between("score", 0.0, 1.0)])  # fmt: skip
    assert not ok and len(failures) == 2
    assert "expect_column_values_to_not_be_null" in failures[0] and "'unexpected_count': 1" in failures[0]
    with pytest.raises(AttributeError):
        validation.validate_frame("broken", frame, [validation.Expect("NoSuchExpectation")])
    assert _held(context) == before == (0, 0, 0)
