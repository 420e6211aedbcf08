"""tatu.sweep.report.conclusions against hand-built reports: what counts as a contradiction and what not."""
from __future__ import annotations

from types import SimpleNamespace

from run_records import config_result, sweep_report

from tatu.records import LogRatio, RelativeChange
from tatu.sweep.report.conclusions import conclusions, disagreements
from tatu.sweep.judge.records import FailedCondition, RuleCheck, SweepVerdict


def _report(chosen, n0_drift, n2_drift, paired=(-0.09, -0.10, -0.08), failed_n0=False):
    def stats(v):  # conclusions reads a record's change only (sweep/judge/records.py ConfigStat, PairedDiff)
        return SimpleNamespace(change=RelativeChange(*v))

    configs = [config_result("replay-n0", {}, (), {"drift": stats(n0_drift), "sftHeld": stats((-0.1, -0.12, -0.08))}),
               config_result("replay-n2", {}, (), {"drift": stats(n2_drift), "sftHeld": stats((-0.1, -0.12, -0.08))},
                             paired={"drift": SimpleNamespace(change=LogRatio(*paired), step=None, unequal=None)})]
    failed = (FailedCondition("drift_hi < 10%", 0.2, 0.1, "+20.0%"),) if failed_n0 else ()
    checks = (RuleCheck("replay-n0", "0", "0", failed, (), False), RuleCheck("replay-n2", "2", "2", (), (), False))
    return sweep_report(SweepVerdict("rule", "REPLAY_N", "end", None, chosen, "line", checks, ()), configs)


def test_the_same_conclusions_from_other_numbers_agree():
    a = _report("0", (0.05, 0.01, 0.09), (-0.02, -0.05, 0.01))
    b = _report("0", (0.04, 0.005, 0.08), (0.01, -0.03, 0.04))  # spans zero in both: no sign concluded
    assert disagreements(conclusions(a), conclusions(b)) == []
    assert conclusions(a).changes["replay-n0 drift"].sign == 1
    assert conclusions(a).changes["replay-n2 drift"].sign == 0
    assert conclusions(a).changes["replay-n2 - baseline drift"].sign == -1


def test_a_sign_that_a_ci_concluded_must_not_turn():
    a = _report("0", (0.05, 0.01, 0.09), (-0.02, -0.05, 0.01))
    b = _report("0", (-0.01, -0.06, 0.04), (-0.02, -0.05, 0.01))  # b spans zero, but its estimate is below it
    found = disagreements(conclusions(a), conclusions(b))
    assert len(found) == 1 and found[0].startswith("replay-n0 drift:")
    assert disagreements(conclusions(b), conclusions(a)) == [found[0].replace(  # symmetric, in its own order
        "+5.0% [+1.0%,+9.0%] vs -1.0% [-6.0%,+4.0%]", "-1.0% [-6.0%,+4.0%] vs +5.0% [+1.0%,+9.0%]")]


def test_another_verdict_or_passing_set_is_a_disagreement():
    a = _report("0", (0.05, 0.01, 0.09), (-0.02, -0.05, 0.01))
    assert disagreements(conclusions(a), conclusions(_report("2", (0.05, 0.01, 0.09), (-0.02, -0.05, 0.01))))
    other = _report("0", (0.05, 0.01, 0.09), (-0.02, -0.05, 0.01), failed_n0=True)
    assert any("passing" in d for d in disagreements(conclusions(a), conclusions(other)))
    paired = _report("0", (0.05, 0.01, 0.09), (-0.02, -0.05, 0.01), paired=(0.01, -0.01, 0.03))
    assert any(d.startswith("replay-n2 - baseline drift") for d in disagreements(conclusions(a), conclusions(paired)))
