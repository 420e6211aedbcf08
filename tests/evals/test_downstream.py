"""tatu.evals.downstream against naive counting and scipy's Wilson interval."""

import random
import unicodedata

import pytest
import scipy.stats

from tatu.data.answers import normalize_answer
from tatu.evals.downstream import Accuracy, exact_match, wilson_interval


@pytest.mark.parametrize("raw, expected", [
    ("  Quarenta e DOIS. ", "quarenta e dois"),
    ('"Quarenta e dois."', "quarenta e dois"),
    ("«Lisboa»!", "lisboa"),
    ("42\".", "42"),
    ("São\n\t  Paulo", "são paulo"),
    (unicodedata.normalize("NFD", "AÇÃO"), "ação"),
    ("Straße", "strasse"),
    ("3.14", "3.14"),          # only final punctuation goes
    ("...", ""),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize("a, b", [("sim", "não"), ("42", "4 2"), ("ação", "acao")])
def test_normalisation_keeps_different_answers_apart(a, b):
    assert normalize_answer(a) != normalize_answer(b)


def test_exact_match_against_a_naive_count():
    rng = random.Random(0)
    answers = ["sim", "não", "Lisboa", "42", "quarenta e dois", "azul"]
    references = [rng.choice(answers) for _ in range(300)]
    predictions = [(f"  {r.upper()}. " if rng.random() < 0.6 else rng.choice(answers))
                   for r in references]
    naive_correct = sum(1 for p, r in zip(predictions, references)
                        if " ".join(p.lower().split()).rstrip(".") == r.lower())
    result = exact_match(predictions, references)
    assert isinstance(result, Accuracy)
    assert result.n == 300 and result.n_correct == naive_correct
    assert result.accuracy == pytest.approx(naive_correct / 300)
    assert result.lo < result.accuracy < result.hi


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (0, 20), (20, 20), (7, 20), (113, 166),
                                  (1, 1000), (500, 1000)])
def test_wilson_interval_matches_scipy(k, n):
    ref = scipy.stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(ref.low, abs=1e-12)
    assert hi == pytest.approx(ref.high, abs=1e-12)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_all_wrong_and_all_right_give_finite_informative_intervals():
    none_right = exact_match(["a"] * 10, ["b"] * 10)
    all_right = exact_match(["b"] * 10, ["b"] * 10)
    assert none_right.accuracy == 0.0 and none_right.lo == 0.0 and 0.2 < none_right.hi < 0.35
    assert all_right.accuracy == 1.0 and all_right.hi == 1.0 and 0.65 < all_right.lo < 0.8


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="predictions is empty"):
        exact_match([], [])
    with pytest.raises(ValueError, match="predictions has 2 items but references has 1"):
        exact_match(["a", "b"], ["a"])
    with pytest.raises(TypeError, match=r"references\[1\]"):
        exact_match(["a", "b"], ["a", None])
    with pytest.raises(TypeError, match="not a str"):
        exact_match("ab", "ab")


def _lm_eval_exact_match():
    import importlib.util

    from strict import cannot_run

    if importlib.util.find_spec("lm_eval") is None:
        cannot_run("lm_eval not installed: pip install -e '.[hf]' (make test installs it)")
    from lm_eval.api.metrics import exact_match_hf_evaluate

    return exact_match_hf_evaluate


def test_normalisation_agrees_with_lm_evals_exact_match_where_its_options_can_say_it():
    """data/answers.py's rule in lm-eval's own terms: ignore_case plus regexes_to_ignore of the ends
    (quotes and whitespace before, quotes, whitespace and final punctuation after). On answers both
    can express (NFC, single inner spaces, letters whose lower() is their casefold()) every decision,
    match and mismatch alike, is lm-eval's; with ignore_punctuation (which tatu does not do) they part."""
    from tatu.data.answers import QUOTES, TRAILING_PUNCTUATION

    exact_match_hf_evaluate = _lm_eval_exact_match()
    ends = [rf"^[\s{QUOTES}]+", rf"[\s{TRAILING_PUNCTUATION}{QUOTES}]+$"]
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZçãéêíóôõúÇÃÉÊÍÓÔÕÚ0123456789"
    inner = ["-", ".", ",", "/"]

    def word():
        return "".join(rng.choice(letters) for _ in range(rng.randint(1, 6)))

    def answer():
        text = " ".join(word() for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.3:
            text = text.replace(" ", rng.choice(inner), 1)
        return text

    def dressed(text):
        text = rng.choice([text, text.upper(), text.lower(), text.title()])
        if rng.random() < 0.4:
            quote = rng.choice(QUOTES)
            text = quote + text + quote
        if rng.random() < 0.5:
            text += "".join(rng.choice(TRAILING_PUNCTUATION + " ") for _ in range(rng.randint(1, 3)))
        return rng.choice(["", " ", "  "]) + text

    pairs = []
    for _ in range(2000):
        reference = answer()
        prediction = dressed(reference if rng.random() < 0.6 else answer())
        if rng.random() < 0.1:  # a near miss: one inner character changed
            i = rng.randrange(len(prediction))
            prediction = prediction[:i] + rng.choice(letters + "-") + prediction[i + 1:]
        elif rng.random() < 0.1:  # "segunda-feira" answered "segundafeira": wrong here, right with ignore_punctuation
            prediction = "".join(c for c in prediction if c not in inner)
        pairs.append((prediction, dressed(reference) if rng.random() < 0.5 else reference))

    ours = [normalize_answer(p) == normalize_answer(r) for p, r in pairs]
    theirs = [exact_match_hf_evaluate([p], [r], ignore_case=True, regexes_to_ignore=ends)["exact_match"] == 1.0
              for p, r in pairs]
    assert 500 < sum(ours) < 1500  # both decisions are exercised many times
    assert ours == theirs
    with_punctuation = [exact_match_hf_evaluate([p], [r], ignore_case=True, ignore_punctuation=True,
                                                regexes_to_ignore=ends)["exact_match"] == 1.0 for p, r in pairs]
    assert ours != with_punctuation  # the check sees a rule that differs (inner punctuation dropped)
