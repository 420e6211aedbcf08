"""Answers right over seeds in the sweep report (sweep/judge/answers.py): read from the members'
eval events (`answers.<SET>.correct`), the start and end rates and the change crossed over seeds x
pairs, checked against a naive mean; in report.json (absent without answers, never 0) and in the
prose: "learned" only where the change's CI is above zero, and one plain sentence when no
configuration's answers rose."""
from __future__ import annotations

from dataclasses import replace

import pytest

from page_world import eval_event, sweep_data, write_run
from tatu.evals.exact import crossed_mean, crossed_rate
from tatu.sweep.judge.answers import config_answers
from tatu.sweep.judge.sweep_report import SweepReport
from tatu.sweep.report.prose import paragraph, what_it_says

N_ITEMS = 10


def _answers(correct: str) -> dict:
    k = correct.count("1")
    return {"rate": k / len(correct), "lo": 0.0, "hi": 1.0, "n": len(correct), "n_correct": k, "n_unfinished": 0,
            "correct": correct, "outputs": ["x"] * len(correct), "change": None}


def _run(root, name: str, start: str, end: str, with_answers: bool = True):
    events = [eval_event(0, 9.0, 31.0, 52.0, 0.0, True), eval_event(4, 8.5, 31.0, 52.0, 0.01, True),
              eval_event(8, 8.0, 31.0, 52.0, 0.02, True)]
    if with_answers:
        events[0]["answers"] = {"sftHeld": _answers(start)}
        events[1]["answers"] = {"sftHeld": _answers("0" * N_ITEMS)}
        events[2]["answers"] = {"sftHeld": _answers(end)}
    return write_run(root / name, events, None)


# per configuration and seed: (step 0's answers, the end's)
RIGHT = {"replay-n0": {1: ("0000000000", "0000000000"), 2: ("0000000000", "0000000001"), 3: ("0000000000", "0000000000")},
         "replay-n6": {1: ("0000000000", "1101101110"), 2: ("1000000000", "1111011100"), 3: ("0000000000", "1011111010")}}


def _bits(text: str) -> list[float]:
    return [float(c) for c in text]


@pytest.fixture
def answered(tmp_path):
    data = sweep_data()
    run_dirs = {f"{key}-s{seed}": _run(tmp_path, f"{key}-s{seed}", *RIGHT[key][seed])
                for key in RIGHT for seed in RIGHT[key]}
    return data, config_answers(list(data.compare.configs), run_dirs)


def test_the_rates_and_change_are_the_naive_crossed_ones_over_seeds_x_pairs(answered):
    _, found = answered
    assert [(a.config, a.set_name) for a in found] == [("replay-n0", "sftHeld"), ("replay-n6", "sftHeld")]
    for a in found:
        start = [_bits(RIGHT[a.config][s][0]) for s in (1, 2, 3)]
        end = [_bits(RIGHT[a.config][s][1]) for s in (1, 2, 3)]
        # the means by hand: right answers over all seeds x pairs
        assert a.start.value == pytest.approx(sum(map(sum, start)) / 30)
        assert a.end.value == pytest.approx(sum(map(sum, end)) / 30)
        assert a.change.value == pytest.approx((sum(map(sum, end)) - sum(map(sum, start))) / 30)
        assert (a.end.lo, a.end.hi) == pytest.approx((crossed_rate(end).lo, crossed_rate(end).hi))
        diffs = [[e - s for s, e in zip(x, y)] for x, y in zip(start, end)]
        assert (a.change.lo, a.change.hi) == pytest.approx((crossed_mean(diffs).lo, crossed_mean(diffs).hi))
        assert a.n_seeds == 3 and a.n_items == N_ITEMS and a.end_steps == (8,)
    n0, n6 = found
    assert n6.learned and not n0.learned


def test_report_json_holds_the_answers_and_none_without(answered):
    data, found = answered
    with_answers = replace(data, answers=found)
    assert SweepReport.from_json(with_answers.to_json()).answers == found
    assert "answers" not in data.to_json()  # a sweep without answers: absent, never 0
    assert SweepReport.from_json(data.to_json()).answers == ()


def test_the_prose_says_answers_right_per_configuration_and_learned_only_from_them(answered, tmp_path):
    data, found = answered
    data = replace(data, answers=found)
    said = {s.states: s.text for s in what_it_says(data)}
    n6 = said["replay-n6 sftHeld answers"]
    assert n6.startswith("replay-n6: sftHeld answers right: 3.3% [") and "-> 70.0% [" in n6
    assert n6.endswith("(more answers right: learned).")
    assert said["replay-n0 sftHeld answers"].endswith("(no change resolved).")
    assert "answers not learned" not in said
    order = [s.states for s in what_it_says(data)]
    assert order.index("replay-n6 sftHeld answers") < order.index("replay-n0 sftHeld answers")  # the chosen first
    # no configuration's answers rose (the demo's case): one plain sentence, and no "learned" anywhere
    flat = {key: {s: ("0" * N_ITEMS, "0" * N_ITEMS) for s in (1, 2, 3)} for key in RIGHT}
    runs = {f"{k}-s{s}": _run(tmp_path / "flat", f"{k}-s{s}", *flat[k][s]) for k in flat for s in flat[k]}
    data = replace(data, answers=config_answers(list(data.compare.configs), runs))
    said = {s.states: s.text for s in what_it_says(data)}
    assert said["replay-n0 sftHeld answers"].startswith("replay-n0: sftHeld answers right: 0.0% [0.0%,")
    assert said["answers not learned"] == ("No configuration answered more held-out pairs right (no change's CI is "
                                           "above zero): the SFT taught the format, not the answers.")
    assert "learned:" not in paragraph(data)


def test_runs_without_answers_have_no_answers_sentence(tmp_path):
    data = sweep_data()
    runs = {f"{k}-s{s}": _run(tmp_path, f"{k}-s{s}", "", "", with_answers=False) for k in RIGHT for s in RIGHT[k]}
    assert config_answers(list(data.compare.configs), runs) == ()
    assert not any("answers" in s.states for s in what_it_says(data))
