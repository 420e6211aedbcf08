"""Answers right between configurations (issue 43 item 3): each configuration minus the baseline,
paired by seed and pair at the common step, checked against a naive pairing by hand (the difference
of each seed's and pair's right/wrong, seeds matched by number whatever order the results hold), in
both directions (baseline minus configuration mirrors it); in report.json; and the rule's
`SET_exact_change[_lo|_hi]` criteria judged on each configuration's own change vs step 0."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from page_world import eval_event, sweep_data, write_run
from tatu.evals.exact import crossed_mean
from tatu.formats import fmt_ci
from tatu.sweep.errors import SweepError
from tatu.sweep.judge.answers import PairedAnswers, answer_metrics, config_answers, paired_answers
from tatu.sweep.judge.sweep_report import SweepReport
from tatu.sweep.plan.rule import parse_rule

N_ITEMS = 10
# per configuration and seed: step 0's answers, step 8's (the common step), step 16's (the end)
RIGHT = {"replay-n0": {1: ("0000000000", "0000000001", "0000000011"), 2: ("0000000000", "0000000000", "1000000000"),
                       3: ("0000000000", "0100000000", "0100000000")},
         "replay-n6": {1: ("0000000000", "1101100000", "1111111111"), 2: ("1000000000", "1111000000", "1111111110"),
                       3: ("0000000000", "1011001000", "1111111111")}}


def _answers(correct: str) -> dict:
    k = correct.count("1")
    return {"rate": k / len(correct), "lo": 0.0, "hi": 1.0, "n": len(correct), "n_correct": k, "n_unfinished": 0,
            "correct": correct, "outputs": ["x"] * len(correct), "change": None}


def _run(root: Path, name: str, answers: tuple[str, ...]) -> Path:
    events = [eval_event(step, 9.0, 31.0, 52.0, 0.0, True) for step in (0, 8, 16)]
    for event, right in zip(events, answers):
        event["answers"] = {"sftHeld": _answers(right)}
    return write_run(root / name, events, None)


@pytest.fixture
def world(tmp_path):
    data = sweep_data()
    run_dirs = {f"{key}-s{seed}": _run(tmp_path, f"{key}-s{seed}", RIGHT[key][seed])
                for key in RIGHT for seed in RIGHT[key]}
    base, replay = data.compare.configs
    base = replace(base, is_baseline=True, common_step=8)
    # the results in another seed order than the baseline's: pairing is by seed number, not position
    replay = replace(replay, is_baseline=False, common_step=8, results=tuple(reversed(replay.results)))
    return [base, replay], run_dirs


def _naive(config: str, baseline: str, step_index: int = 1) -> list[list[float]]:
    """The per-(seed, pair) differences by hand, seeds matched by number."""
    return [[float(a) - float(b) for a, b in zip(RIGHT[config][seed][step_index], RIGHT[baseline][seed][step_index])]
            for seed in (1, 2, 3)]


def test_the_paired_difference_is_the_naive_one_at_the_common_step_in_both_directions(world):
    configs, run_dirs = world
    (found,) = paired_answers(configs, run_dirs)
    diffs = _naive("replay-n6", "replay-n0")
    assert found.at == "step 8" and found.n_seeds == 3 and found.n_items == N_ITEMS
    assert found.diff.value == pytest.approx(sum(map(sum, diffs)) / 30)  # (13 - 2) / 30
    naive = crossed_mean(diffs)
    assert (found.diff.lo, found.diff.hi, found.p_value) == pytest.approx((naive.lo, naive.hi, naive.p_value))
    assert found.diff.lo > 0  # more answers right than the baseline at equal steps
    # the other way round: the baseline as the configuration mirrors it
    swapped = [replace(configs[0], is_baseline=False), replace(configs[1], is_baseline=True)]
    (mirror,) = paired_answers(swapped, run_dirs)
    assert mirror.diff.value == pytest.approx(-found.diff.value)
    assert (mirror.diff.lo, mirror.diff.hi) == pytest.approx((-found.diff.hi, -found.diff.lo))
    assert mirror.diff.value == pytest.approx(sum(map(sum, _naive("replay-n0", "replay-n6"))) / 30)
    # at the ends (step 16) the difference would be another number: the common step's is the one compared
    assert sum(map(sum, _naive("replay-n6", "replay-n0", 2))) / 30 != pytest.approx(found.diff.value)


def test_report_json_holds_the_paired_answers(world):
    configs, run_dirs = world
    found = paired_answers(configs, run_dirs)
    report = replace(sweep_data(), answers_paired=found)
    assert SweepReport.from_json(report.to_json()).answers_paired == found
    assert PairedAnswers.from_json(found[0].to_json()) == found[0]
    assert "answers_paired" not in sweep_data().to_json()  # none without answers: absent, never 0


def test_a_rule_names_the_change_in_answers_right_and_its_value_is_the_configurations_own(world):
    configs, run_dirs = world
    rule = parse_rule("smallest REPLAY_N such that sftHeld_exact_change_lo > 0 and drift_hi < 5%",
                      {"REPLAY_N": ["0", "6"]}, Path("plan.toml"))
    cond = rule.conditions[0]
    assert (cond.metric, cond.op) == ("sftHeld_exact_change_lo", ">")
    metrics = answer_metrics(config_answers(configs, run_dirs, common=True))
    by_hand = [[float(e) - float(s) for s, e in zip(RIGHT["replay-n6"][seed][0], RIGHT["replay-n6"][seed][1])]
               for seed in (1, 2, 3)]
    assert metrics["replay-n6"]["sftHeld_exact_change"] == pytest.approx(sum(map(sum, by_hand)) / 30)
    assert cond.holds(metrics["replay-n6"]["sftHeld_exact_change_lo"], {})
    assert not cond.holds(metrics["replay-n0"]["sftHeld_exact_change_lo"], {})
    at_end = answer_metrics(config_answers(configs, run_dirs))
    assert at_end["replay-n6"]["sftHeld_exact_change"] > metrics["replay-n6"]["sftHeld_exact_change"]
    with pytest.raises(SweepError, match="unknown metric 'sftHeld_exact_lo'"):
        parse_rule("smallest REPLAY_N such that sftHeld_exact_lo > 0", {"REPLAY_N": ["0"]}, Path("plan.toml"))


def test_the_prose_says_the_paired_answers_with_their_step_and_a_direction_only_when_resolved(world):
    from tatu.sweep.report.prose import paragraph

    configs, run_dirs = world
    found = paired_answers(configs, run_dirs)
    text = paragraph(replace(sweep_data(), answers_paired=found))
    diff = found[0].diff
    assert (f"replay-n6 vs replay-n0 at step 8, paired by seed and pair: sftHeld answers right "
            f"{fmt_ci(diff.value, diff.lo, diff.hi)} over 3 seeds x 10 pairs (more right).") in text
    spanning = replace(found[0], diff=replace(diff, lo=-0.01))
    assert "(no difference resolved)" in paragraph(replace(sweep_data(), answers_paired=(spanning,)))


def test_the_closing_text_and_page_show_the_answers_tables(world, tmp_path):
    from tatu.sweep.report import tables
    from tatu.sweep.report.page import write_page

    configs, run_dirs = world
    found = paired_answers(configs, run_dirs)
    report = replace(sweep_data(), answers=config_answers(configs, run_dirs), answers_paired=found)
    text = tables.closing_text(report)
    assert tables.PAIRED_ANSWERS_NOTE in text and tables.ANSWERS_NOTE in text
    row = next(line for line in text.splitlines() if line.startswith("replay-n6 vs replay-n0  sftHeld"))
    assert "step 8" in row and fmt_ci(found[0].diff.value, found[0].diff.lo, found[0].diff.hi) in row
    page = write_page(report, text, [], tmp_path).read_text()
    assert 'id="answers-paired"' in page and 'id="answers"' in page


def test_the_verdict_judges_the_answers_criterion_and_leaves_a_set_without_answers_unjudged(world):
    from tatu.sweep.judge.analysis import _with_answer_metrics
    from tatu.sweep.judge.verdict import condition_check

    configs, run_dirs = world
    configs = [replace(c, metrics={"drift_hi": 0.0}, metrics_common={"drift_hi": 0.0}) for c in configs]
    judged = _with_answer_metrics(configs, config_answers(configs, run_dirs), config_answers(configs, run_dirs, common=True))
    rule = parse_rule("smallest REPLAY_N such that sftHeld_exact_change_lo > 0 at the common step",
                      {"REPLAY_N": ["0", "6"]}, Path("plan.toml"))
    base, replay = (condition_check(rule, c, c.key) for c in judged)
    assert replay.passes and not base.passes and base.failed[0].condition == "sftHeld_exact_change_lo > 0"
    other = parse_rule("smallest REPLAY_N such that ptFaq_exact_change_lo > 0", {"REPLAY_N": ["0", "6"]}, Path("plan.toml"))
    assert condition_check(other, judged[1], "6").missing == ("ptFaq_exact_change_lo",)  # no answers: absent, never 0
