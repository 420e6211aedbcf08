"""Equal SFT tokens (issue 43 item 1): where configurations train different SFT tokens per step
(SFT_GE, micro-batch, sequence length), they are compared at equal SFT tokens seen, each at its own
step, and every row and title says so; at equal tokens per step, at one step as before."""
from __future__ import annotations

from dataclasses import replace

from tatu.sweep.judge.common_step import (ComparedAt, ComparisonPoint, comparison_point, compared_at, equal_ends,
                                          sft_tokens_per_step)
from tatu.sweep.judge.records import ConfigResult, EvalDrifts, MemberResult
from tatu.sweep.report import tables


def _result(key: str, seed: int, evals: tuple[int, ...]) -> MemberResult:
    drifts = EvalDrifts(0.0, 0.0, 0.0, tuple((s, 0.0, 0.0) for s in evals))
    return MemberResult(member=f"{key}-s{seed}", config=key, seed=seed, values={}, state="done", verdict=None,
                        steps=max(evals), evals=drifts, lines={"end": {}})


def _effective(sft_ge: int, micro: int = 8, seq: int = 128) -> dict:
    return {"SFT_GE": sft_ge, "TATU_MICRO_BATCH": micro, "TATU_SEQ_LEN": seq, "REPLAY_N": 0}


def test_tokens_per_step_are_the_settings_product():
    assert sft_tokens_per_step(_effective(8)) == 8 * 8 * 128
    assert sft_tokens_per_step(_effective(4, micro=2, seq=64)) == 4 * 2 * 64


def test_equal_tokens_per_step_compare_at_the_last_step_every_member_reached():
    grouped = {"a": [_result("a", 1, (8, 16, 24)), _result("a", 2, (8,))], "b": [_result("b", 1, (8, 16, 24))]}
    point = comparison_point(grouped, {"a": 8192, "b": 8192})
    assert point == ComparisonPoint({"a": 8, "b": 8}) and point.text() == "at step 8"


def test_unequal_tokens_per_step_compare_at_the_most_tokens_every_member_saw_at_an_eval():
    # ge8 trains 8,192 SFT tokens a step, ge4 4,096: ge8 at step 8 has seen what ge4 sees at 16
    grouped = {"ge8": [_result("ge8", s, (8, 16, 24)) for s in (1, 2)],
               "ge4": [_result("ge4", 1, (8, 16, 24)), _result("ge4", 2, (8, 16))]}
    point = comparison_point(grouped, {"ge8": 8192, "ge4": 4096})
    assert point.steps == {"ge8": 8, "ge4": 16} and point.tokens == 8 * 8192 == 16 * 4096
    assert point.text() == "at equal SFT tokens: 65,536"
    # with no eval step of one reaching a token count another reaches, nothing is comparable: said, not guessed
    assert comparison_point({"x": [_result("x", 1, (3,))], "y": [_result("y", 1, (2,))]}, {"x": 5, "y": 7}) is None


def test_of_two_token_counts_every_member_reaches_the_most_is_the_comparison_point():
    # ge8 trains twice ge4's tokens a step; ge8's evals reach 8t, 16t and 24t (t = ge4's tokens a step),
    # ge4's reach 8t and 16t (one seed ended at 16): two shared counts, and the most of them is where
    # they compare (the fewest, 8t, would be a comparison before every member's last common eval)
    grouped = {"ge8": [_result("ge8", s, (4, 8, 12)) for s in (1, 2)],
               "ge4": [_result("ge4", 1, (8, 16, 24)), _result("ge4", 2, (8, 16))]}
    point = comparison_point(grouped, {"ge8": 8192, "ge4": 4096})
    assert point.steps == {"ge8": 8, "ge4": 16} and point.tokens == 16 * 4096


def test_equal_ends_means_one_step_for_every_member_of_both():
    ends = replace(_config("a", 8, None, 8), end_steps=(8, 24))  # one seed aborted at 8, one ran to 24
    assert not equal_ends(ends, replace(_config("b", 8, None, 8), end_steps=(8, 24)))  # the same ends, not one end
    assert equal_ends(replace(ends, end_steps=(24,)), replace(ends, key="b", end_steps=(24,)))
    assert not equal_ends(replace(ends, end_steps=(24,)), replace(ends, key="b", end_steps=(8,)))
    assert not equal_ends(replace(ends, end_steps=()), replace(ends, key="b", end_steps=()))


def _config(key: str, step: int, tokens: int | None, sft_ge: int) -> ConfigResult:
    return ConfigResult(key=key, values={}, results=(), stats=None, categories=None, stats_common=None,
                        categories_common=None, common_step=step, common_missing=None, end_steps=(24,), trainable=None,
                        effective=_effective(sft_ge), half=None, common_tokens=tokens)


def test_a_comparison_at_equal_tokens_says_both_steps_and_the_tokens():
    ge4, ge8 = _config("ge4", 16, 65536, 4), _config("ge8", 8, 65536, 8)
    assert compared_at(ge4, ge8, common=True) == ComparedAt(at="equal SFT tokens: 65,536 (steps 16 vs 8)")
    assert compared_at(replace(ge4, common_tokens=None, common_step=8), ge8, common=True) == ComparedAt(step=8)
    assert tables.common_title([ge8, ge4]).startswith("at equal SFT tokens: 65,536")
    same = [_config("a", 8, None, 8), _config("b", 8, None, 8)]
    assert tables.common_title(same) == "at step 8, the last eval step every member reached"


def test_a_paired_row_at_equal_tokens_prints_where_it_compared():
    from tatu.records import LogRatio
    from tatu.sweep.judge.records import PairedDiff

    p = PairedDiff(LogRatio(0.1, 0.05, 0.15), 0.01, 3.0, 4.0, 2, 0.01, 0.02, None, 0.01, 1,
                   at="equal SFT tokens: 65,536 (steps 16 vs 8)")
    ge4, ge8 = _config("ge4", 16, 65536, 4), replace(_config("ge8", 8, 65536, 8), is_baseline=True)
    (row,) = tables.paired_rows([ge8, replace(ge4, paired_common={"drift": p, "sftHeld": p})], common=True)
    assert row[2] == "equal SFT tokens: 65,536 (steps 16 vs 8)"
    assert PairedDiff.from_json(p.to_json()) == p


def test_a_verdict_judged_at_equal_tokens_names_the_tokens_not_one_configurations_step():
    """At the common point with unequal SFT tokens per step each configuration is judged at its own
    step: the verdict line once named only the first configuration's ("judged at step 16")."""
    from types import SimpleNamespace

    from tatu.sweep.judge import verdict
    from tatu.sweep.judge.records import SweepVerdict

    common = SimpleNamespace(at="common")
    ge4, ge8 = _config("ge4", 16, 65536, 4), _config("ge8", 8, 65536, 8)
    assert verdict._at_tokens(common, [ge4, ge8]) == 65536 and verdict._at_step(common, [ge4, ge8]) is None
    same = [_config("a", 8, None, 8), _config("b", 8, None, 8)]
    assert verdict._at_tokens(common, same) is None and verdict._at_step(common, same) == 8
    assert verdict._at_tokens(SimpleNamespace(at="end"), [ge4, ge8]) is None

    judged = SweepVerdict("r", "SFT_GE", "common", None, "4", "line", (), (), True, at_tokens=65536)
    assert judged.judged_where() == " (judged at equal SFT tokens: 65,536, each configuration at its own step)"
    assert SweepVerdict.from_json(judged.to_json()) == judged
    at_step = SweepVerdict("r", "SFT_GE", "common", 8, "4", "line", (), (), True)
    assert at_step.judged_where() == " (judged at step 8, the common step)" and "at_tokens" not in at_step.to_json()
    assert tables.verdict_lines(judged, True)[0].endswith(judged.judged_where())
