"""Prompt budgeting and parsing, and LaMP metrics against hand-computed values."""

import math

import pytest

from prag_models.generation.prompts import budget_documents, build_prompt, parse_output
from prag_models.metrics.lamp import lamp_metrics, sample_quality


def _count(text):
    return len(text.split())


def _truncate(text, n):
    return " ".join(text.split()[:n])


def test_budget_carries_unused_tokens_over():
    # L_max = 10, gamma = 0.5 -> query keeps min(4, 5) = 4 tokens, 6 left for 3 docs: 2 each, unused carried over.
    docs = ["a", "b1 b2 b3 b4", "c1 c2 c3 c4 c5"]
    fitted, query = budget_documents(docs, "q1 q2 q3 q4", _count, _truncate, 10, 0.5)
    assert query == "q1 q2 q3 q4"
    # doc1 uses 1 of 2; doc2 gets (6-1)//2 = 2 tokens; doc3 gets the remaining 3.
    assert fitted == ["a", "b1 b2", "c1 c2 c3"]


def test_long_query_is_cut_to_gamma_share():
    fitted, query = budget_documents(["d1 d2 d3 d4"], " ".join(f"q{i}" for i in range(20)), _count, _truncate, 10, 0.6)
    assert query == "q0 q1 q2 q3 q4 q5"
    assert fitted == ["d1 d2 d3 d4"]


def test_prompt_holds_docs_instruction_and_input():
    prompt = build_prompt("LaMP-3", "review: great", ["doc one", "doc two"])
    assert prompt.startswith("The historical profiles are as follows:\n1. doc one\n2. doc two\n")
    assert "1 to 5" in prompt and prompt.endswith("User input: review: great")
    assert "historical profiles" not in build_prompt("LaMP-3", "review: great", [])


@pytest.mark.parametrize(
    ("task", "raw", "expected"),
    [
        ("LaMP-1", "The answer is [2].", "[2]"),
        ("LaMP-1", "1", "[1]"),
        ("LaMP-2", "Tag: dark comedy", "dark comedy"),
        ("LaMP-2", "I like it", "I like it"),
        ("LaMP-3", "Score: 4", "4"),
        ("LaMP-3", "4.0", "4"),
        ("LaMP-4", 'Sure! {"title": "Mars rover lands"} done', "Mars rover lands"),
        ("LaMP-7", '{"tweet": "off to the gym', "off to the gym"),
        ("LaMP-5", "A plain title\nmore", "A plain title"),
    ],
)
def test_parse_output(task, raw, expected):
    assert parse_output(task, raw) == expected


def test_classification_metrics_macro_f1_over_label_set():
    # Golds [1],[1],[2]; predictions [1],[2],[2]: acc 2/3; F1([1]) = 2/3 (p=1, r=1/2), F1([2]) = 2/3 (p=1/2, r=1).
    m = lamp_metrics("LaMP-1", ["[1]", "[2]", "[2]"], ["[1]", "[1]", "[2]"])
    assert m["accuracy"] == pytest.approx(2 / 3)
    assert m["f1_macro"] == pytest.approx(2 / 3)


def test_unknown_answer_counts_as_wrong_label():
    m = lamp_metrics("LaMP-1", ["maybe", "[2]"], ["[1]", "[2]"])
    assert m["accuracy"] == pytest.approx(0.5)
    # [1]: p = 0/0 -> 0, r = 0 -> F1 0; [2]: p = 1, r = 1 -> F1 1; macro = 0.5.
    assert m["f1_macro"] == pytest.approx(0.5)


def test_rating_metrics_non_numeric_gets_farthest_rating():
    # gold 4, non-numeric -> 1 (|1-4| > |5-4|): error 3; gold 2, pred 2: error 0; gold 1, pred 3: error 2.
    m = lamp_metrics("LaMP-3", ["great", "2", "3"], ["4", "2", "1"])
    assert m["mae"] == pytest.approx(5 / 3)
    assert m["rmse"] == pytest.approx(math.sqrt((9 + 0 + 4) / 3))


def test_rouge_without_stemming_not_lowercasing_predictions():
    # "cats run" vs "cat runs": no common unigram without stemming.
    m = lamp_metrics("LaMP-5", ["cats run", "deep learning for graphs"], ["cat runs", "deep learning on graphs"])
    # sample 2: 3 of 4 unigrams match: P = R = F = 0.75; LCS = 3 -> rougeL 0.75.
    assert m["rouge1"] == pytest.approx(0.375)
    assert m["rougeL"] == pytest.approx(0.375)


def test_sample_quality_negates_errors():
    assert sample_quality("LaMP-3", "2", "5") == pytest.approx(-3.0)
    assert sample_quality("LaMP-2", "comedy", "comedy") == 1.0


def test_metric_input_errors():
    with pytest.raises(ValueError, match="2 predictions for 1 golds"):
        lamp_metrics("LaMP-1", ["[1]", "[2]"], ["[1]"])


def test_lamp3_prompt_document_shows_the_rating():
    from prag_models.generation.prompts import prompt_document

    assert prompt_document("LaMP-3", "nice pan", {"text": "nice pan", "score": "4"}) == "'review': nice pan 'score': 4"
    assert prompt_document("LaMP-2", "'description': x 'tag': comedy", {}) == "'description': x 'tag': comedy"
