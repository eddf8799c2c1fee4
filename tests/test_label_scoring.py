"""Label scoring: LaMP-1/2/3 answered by the label of highest log-likelihood, with the real packaged model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pytest

from prag_models.config.settings import GeneratorSettings, load_settings
from prag_models.data.tasks import LABELS
from prag_models.generation.answers import (
    GENERATION,
    LABEL_SCORING,
    answer_cached,
    answer_mode,
    choose_labels,
    label_priors,
    label_scoring_key,
)
from prag_models.generation.prompts import build_prompt, content_free_prompts
from prag_models.llm.base import GenerationError, Generator, answer_continuation
from prag_models.llm.factory import make_generator
from prag_models.methods.cfrag.feedback_labels import feedback_prompt_version

TAG_PROMPT = "Pick one tag from [sci-fi, comedy, dark comedy, romance] for: a spaceship crew explores a far galaxy."
TAGS = ["sci-fi", "comedy", "dark comedy", "romance"]


class TableScorer(Generator):
    """Scores choices from a fixed table; counts the prompts it scored."""

    model_id = "table:v1"
    can_score_choices = True

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.scored: list[str] = []

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        return ["generated"] * len(prompts)

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        self.scored += prompts
        return [[self.table.get(c, -10.0) for c in choices] for _ in prompts]


def test_answer_mode_follows_task_backend_and_switch() -> None:
    on = GeneratorSettings()
    assert answer_mode("LaMP-2", on) == LABEL_SCORING and answer_mode("LaMP-3", on) == LABEL_SCORING
    assert answer_mode("LaMP-5", on) == GENERATION
    assert answer_mode("LaMP-1", GeneratorSettings(label_scoring=False)) == GENERATION
    assert answer_mode("LaMP-1", GeneratorSettings(backend="openai")) == GENERATION
    assert answer_mode("LaMP-1", GeneratorSettings(backend="fake")) == GENERATION


def test_feedback_labels_are_keyed_by_answer_mode() -> None:
    assert feedback_prompt_version("LaMP-2", load_settings(environ={})).endswith(".gll")  # gold log-likelihood
    metric = {"PRAG__CFRAG__FEEDBACK_SIGNAL": "metric"}
    scoring = load_settings(environ=metric)
    generating = load_settings(environ={**metric, "PRAG__GENERATOR__LABEL_SCORING": "false"})
    assert feedback_prompt_version("LaMP-2", scoring).endswith(".lsc")
    uncalibrated = load_settings(environ={**metric, "PRAG__GENERATOR__LABEL_CALIBRATION": "false"})
    assert feedback_prompt_version("LaMP-2", uncalibrated).endswith(".ls")
    assert feedback_prompt_version("LaMP-2", generating).endswith(".n8")
    assert feedback_prompt_version("LaMP-5", scoring) == feedback_prompt_version("LaMP-5", generating)


def test_choose_labels_takes_the_argmax_and_the_first_on_ties() -> None:
    assert choose_labels("LaMP-3", TableScorer({"4": -1.0, "2": -3.0}), ["p"]) == ["4"]
    assert choose_labels("LaMP-3", TableScorer({}), ["p"]) == ["1"]
    assert choose_labels("LaMP-1", TableScorer({"[2]": -0.5}), ["p", "q"]) == ["[2]", "[2]"]


def test_label_answers_are_cached_apart_from_generations(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "cache.duckdb"))
    settings = GeneratorSettings(batch_size=2, label_calibration=False)  # calibration: see the test above
    scorer = TableScorer({"5": -0.1})
    out, ran = answer_cached("LaMP-3", scorer, ["a", "b", "a"], settings, con)
    assert out == ["5", "5", "5"] and ran == 2 and scorer.scored == ["a", "b"]
    again = TableScorer({"1": -0.1})  # same model id: the cached labels are reused, not rescored
    out, ran = answer_cached("LaMP-3", again, ["a", "b"], settings, con)
    assert out == ["5", "5"] and ran == 0 and again.scored == []
    out, ran = answer_cached("LaMP-5", again, ["a"], settings, con)  # a generation task generates
    assert out == ["generated"] and ran == 1
    keys = dict(con.execute("SELECT generator_id, max_new_tokens FROM generation_cache").fetchall())
    assert keys == {"table:v1#label_scoring": 0, "table:v1": 32}
    con.close()


def test_label_scoring_needs_a_backend_that_can_score(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "cache.duckdb"))
    cannot = TableScorer({})
    cannot.can_score_choices = False
    with pytest.raises(GenerationError, match="label_scoring = false"):
        answer_cached("LaMP-2", cannot, ["a"], GeneratorSettings(), con)
    con.close()


def test_answer_continuation_rejects_a_template_that_rewrites_the_prompt() -> None:
    assert answer_continuation("<u>hi</u><a>", "<u>hi</u><a>4</a>\n", "4") == "4</a>"
    with pytest.raises(GenerationError, match="prefix-stable"):
        answer_continuation("<u>hi</u><a>", "<u>HI</u><a>4</a>", "4")


class BiasedScorer(Generator):
    """A model that prefers "1" for every input, and "4" a little more when the prompt holds a 4-rated document."""

    model_id = "biased:v1"
    can_score_choices = True

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        return ["1"] * len(prompts)

    def score_choices(self, prompts: Sequence[str], choices: Sequence[str]) -> list[list[float]]:
        base = {"1": -1.0, "2": -5.0, "3": -5.0, "4": -4.0, "5": -5.0}
        return [[base[c] + (2.0 if c == "4" and "'score': 4" in p else 0.0) for c in choices] for p in prompts]


def test_calibration_removes_a_fixed_label_preference(tmp_path: Path) -> None:
    zero_shot, with_profile = content_free_prompts("LaMP-3")
    assert "N/A" in zero_shot and not zero_shot.startswith("The historical") and with_profile.startswith("The hist")
    scorer = BiasedScorer()
    priors = label_priors("LaMP-3", scorer)
    rated = build_prompt("LaMP-3", "Great blender.", ["'review': loud but fine 'score': 4"])
    plain = build_prompt("LaMP-3", "Great blender.", [])
    assert choose_labels("LaMP-3", scorer, [rated, plain]) == ["1", "1"]  # the fixed preference wins uncalibrated
    assert choose_labels("LaMP-3", scorer, [rated, plain], priors) == ["4", "1"]  # only the evidence moves it
    con = duckdb.connect(str(tmp_path / "cache.duckdb"))
    on, off = GeneratorSettings(backend="llama_cpp"), GeneratorSettings(backend="llama_cpp", label_calibration=False)
    assert label_scoring_key(scorer, on) != label_scoring_key(scorer, off)
    assert answer_cached("LaMP-3", scorer, [rated], on, con)[0] == ["4"]
    assert answer_cached("LaMP-3", scorer, [rated], off, con)[0] == ["1"]  # its own cache entry, not the other's
    assert answer_cached("LaMP-3", scorer, [rated], on, con) == (["4"], 0)  # cached: no model call
    con.close()


# ---------------------------------------------------------------- real packaged SmolLM2 through llama.cpp

#: The context of this module's llama_generator (tests/conftest.py): a prompt of 600 words goes beyond it.
LLAMA_N_CTX = 512


def test_llama_cpp_scores_reuse_the_prompt_cache_exactly(llama_generator: Generator) -> None:
    together = llama_generator.score_choices([TAG_PROMPT, TAG_PROMPT], TAGS)
    alone = [llama_generator.score_choices([TAG_PROMPT], [t])[0][0] for t in TAGS]
    assert together[0] == pytest.approx(alone, abs=1e-4) and together[1] == pytest.approx(alone, abs=1e-4)
    assert all(s < 0 for s in alone) and len(set(alone)) == len(alone)
    assert max(range(4), key=alone.__getitem__) == 0  # a spaceship story is sci-fi, even for a 135M model


def test_llama_cpp_label_scores_move_with_the_retrieved_ratings(llama_generator: Generator) -> None:
    # The same review with a profile that rates such products 1 or 5: the profile must shift the rating scores.
    review = "The blender works, it is loud but it makes smoothies."
    docs = ["Loud but works fine, does the job.", "Makes soup, noisy motor.", "Sturdy jug, loud."]
    rows = llama_generator.score_choices(
        [build_prompt("LaMP-3", review, [f"'review': {t} 'score': {r}" for t in docs]) for r in "15"], list("12345")
    )
    one_vs_five = [row[0] - row[4] for row in rows]
    assert one_vs_five[0] > one_vs_five[1] + 0.5
    tag = choose_labels("LaMP-2", llama_generator, [build_prompt("LaMP-2", "A robot falls in love.", [])])
    assert tag[0] in LABELS["LaMP-2"]


def test_llama_cpp_scoring_beyond_the_context_is_a_generation_error(llama_generator: Generator) -> None:
    with pytest.raises(GenerationError, match="n_ctx"):
        llama_generator.score_choices(["word " * 600], ["1", "2"])


def test_transformers_and_llama_cpp_pick_the_same_label(llama_generator: Generator) -> None:
    gen = make_generator(GeneratorSettings(backend="transformers"))
    try:
        together = gen.score_choices([TAG_PROMPT], TAGS)[0]
        alone = [gen.score_choices([TAG_PROMPT], [t])[0][0] for t in TAGS]
    finally:
        gen.close()
    assert together == pytest.approx(alone, abs=1e-6)  # the cropped KV cache gives the same as a fresh prompt
    # Same weights (transformers dequantises the GGUF), different kernels: close scores, the same best label.
    llama = llama_generator.score_choices([TAG_PROMPT], TAGS)[0]
    assert max(range(4), key=together.__getitem__) == max(range(4), key=llama.__getitem__) == 0
    assert max(abs(a - b) for a, b in zip(together, llama, strict=True)) < 1.5
