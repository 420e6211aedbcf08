"""The "what it says" paragraph (sweep/report/prose.py) against the report data it is written from: one
sentence per conclusion of the conclusion set, each with its CI as fmt_ci writes it; a number
changed in the report changes its sentence; a CI across zero yields no claim of direction."""
from __future__ import annotations

import math
from dataclasses import replace

from page_world import sweep_data
from tatu.formats import fmt_ci
from tatu.records import LogRatio, RelativeChange
from tatu.sweep.report.conclusions import conclusions
from tatu.sweep.report.prose import paragraph, what_it_says
from tatu.sweep.judge.power import SeedsFor, SeedsForEffect
from tatu.sweep.judge.records import ConfigResult, PairedDiff, RuleCheck
from tatu.sweep.judge.sweep_report import SweepReport

DIRECTION_WORDS = ("rose", "fell", "lower", "higher", "learned", "forgot", "worse", "better")


def with_config(data: SweepReport, index: int, config: ConfigResult) -> SweepReport:
    configs = tuple(config if i == index else c for i, c in enumerate(data.compare.configs))
    return replace(data, compare=replace(data.compare, configs=configs))


def report() -> SweepReport:
    """sweep_data with a paired comparison (log-ratio differences, as sweep/judge/analysis.py writes them),
    every member ending at step 24 (a comparison at unequal ends claims no direction: test_like_with_like.py)."""
    data = sweep_data()
    data = replace(data, compare=replace(data.compare, configs=tuple(replace(c, end_steps=(24,))
                                                                     for c in data.compare.configs)))
    verdict = data.verdict
    data = replace(data, verdict=replace(verdict, chosen="6", checks=verdict.checks + (RuleCheck("replay-n6", "6", "6", (), (), False),)))
    return with_config(data, 1, replace(data.compare.configs[1], paired={
        "drift": paired(0.85, 0.82, 0.88, 0.001), "sftHeld": paired(0.9, 0.75, 1.05, 0.2)}))


def paired(ratio: float, lo: float, hi: float, p_value: float) -> PairedDiff:
    """A paired difference as sweep/judge/stats.py makes it: log ratios (the rest is not read by the prose)."""
    return PairedDiff(LogRatio(math.log(ratio), math.log(lo), math.log(hi)), p_value, None, None, 3, 0.01, 0.02, None)


def set_change(data: SweepReport, config: int, metric: str, value: float, lo: float, hi: float) -> SweepReport:
    stats = dict(data.compare.configs[config].stats)
    stats[metric] = replace(stats[metric], change=RelativeChange(value, lo, hi))
    return with_config(data, config, replace(data.compare.configs[config], stats=stats))


def _by_state(data) -> dict[str, str]:
    return {s.states: s.text for s in what_it_says(data)}


def test_one_sentence_per_conclusion_each_with_its_ci():
    data = report()
    found = conclusions(data)
    said = _by_state(data)
    resolved = {name for name, interval in found.changes.items() if interval.sign != 0}
    # drift rose in both configurations: said once more, as a loss no configuration escaped
    assert set(said) == {"verdict", "passed", "not resolved", "worse everywhere drift"} | resolved
    assert said["verdict"] == "The locked rule chose REPLAY_N=6."
    assert said["passed"] == ("Passing every condition of the rule: replay-n6; failing: replay-n0 "
                              "(drift_hi < MIX_FORGET_LIMIT +17.7%).")
    for name in resolved:
        i = found.changes[name]
        assert fmt_ci(i.value, i.lo, i.hi) in said[name], (name, said[name])
    drift = data.compare.configs[0].stats["drift"]
    assert said["replay-n0 drift"] == (f"replay-n0: enRuler drift rose (the ruler's English got worse), "
                                       f"{drift.change.text()} over seeds x lines vs step 0.")
    assert said["replay-n6 - baseline drift"] == ("replay-n6 vs replay-n0, paired by seed and line: enRuler drift lower, "
                                                  "-15.0% [-18.0%,-12.0%] over seeds x lines.")
    assert paragraph(data) == " ".join(s.text for s in what_it_says(data))


def test_a_number_changed_in_the_report_changes_its_sentence():
    data = report()
    before = _by_state(data)["replay-n6 drift"]
    data = set_change(data, 1, "drift", 0.052, 0.031, 0.073)
    after = _by_state(data)["replay-n6 drift"]
    assert after != before
    assert after == "replay-n6: enRuler drift rose (the ruler's English got worse), +5.2% [+3.1%,+7.3%] over seeds x lines vs step 0."
    data = replace(data, verdict=replace(data.verdict, chosen=None))
    assert _by_state(data)["verdict"] == "No value satisfies the locked rule."


def test_a_ci_across_zero_claims_no_direction():
    data = report()
    data = set_change(data, 1, "drift", -0.004, -0.02, 0.012)
    said = _by_state(data)
    assert "replay-n6 drift" not in said and "replay-n6 - baseline sftHeld" not in said
    unresolved = said["not resolved"]
    assert "replay-n6 enRuler drift -0.4% [-2.0%,+1.2%]" in unresolved
    assert "replay-n6 vs replay-n0 sftHeld change difference -10.0% [-25.0%,+5.0%]" in unresolved
    claims = unresolved.split(": ", 1)[1]
    assert not any(word in claims for word in DIRECTION_WORDS), claims


def _seeds_for_row(config: str, vs: str | None, metric: str, seeds: int | None, n_seeds: int = 3, **fields) -> SeedsFor:
    """A seeds-for row as sweep/judge/power.py makes it."""
    row = {"config": config, "vs": vs, "metric": metric, "n_seeds": n_seeds, "n_lines": 100, "mde_now": 0.209,
           "seeds": seeds, "line_floor": 0.061, "known": True}
    return SeedsFor(**{**row, **fields})


def _with_rows(data: SweepReport, *rows: SeedsFor) -> SweepReport:
    return replace(data, seeds_for=SeedsForEffect(0.02, 0.8, "end", rows))


def test_learning_the_seeds_run_cannot_resolve_is_said_with_why_and_resolved_learning_is_not():
    data = report()
    data = _with_rows(data,
        _seeds_for_row("replay-n6", None, "drift", 2),  # drift rows never enter the learning sentence
        _seeds_for_row("replay-n0", None, "sftHeld", 231, mde_now=0.224, line_floor=0.0152),
        _seeds_for_row("replay-n6", "replay-n0", "sftHeld", None))
    said = _by_state(data)["learning not resolved"]
    assert said == ("Learning (sftHeld) is not resolved at the plan's effect of 2% (80% power, seeds x lines): "
                    "replay-n0 change: at 3 seeds it resolves 22.4%: the spread from seed to seed needs 231 seeds; "
                    "replay-n6 vs replay-n0 difference: at 3 seeds it resolves 20.9%, and no number of seeds would "
                    "resolve less with these 100 lines: the lines shared by every seed alone allow 6.1% (more lines "
                    "would). A learning claim here rests only on a CI that excludes zero, above.")
    assert "replay-n6 change" not in said and "drift" not in said
    # a row whose needed seeds were run is resolved: once every sftHeld row is, no such sentence
    data = _with_rows(data, _seeds_for_row("replay-n0", None, "sftHeld", 3),
                      _seeds_for_row("replay-n6", "replay-n0", "sftHeld", 2))
    assert "learning not resolved" not in _by_state(data)
    data = _with_rows(data, *data.seeds_for.rows, _seeds_for_row("replay-n6", None, "sftHeld", 4))
    assert _by_state(data)["learning not resolved"].split(": ", 1)[1].startswith(
        "replay-n6 change: at 3 seeds it resolves 20.9%: the spread from seed to seed needs 4 seeds.")
    # one seed: its seed-to-seed spread is not measured, and the sentence says that rather than a count
    data = _with_rows(data, _seeds_for_row("replay-n6", None, "sftHeld", None, n_seeds=1, known=False,
                                           mde_now=None, line_floor=None, n_lines=None))
    assert "replay-n6 change: its seed-to-seed spread is not measured at 1 seed." in _by_state(data)["learning not resolved"]


def with_ptval(data: SweepReport, changes: dict[str, tuple[float, float, float]]) -> SweepReport:
    """Each named configuration with a ptVal change over seeds (the stats sweep/judge/sets.py adds)."""
    for index, config in enumerate(data.compare.configs):
        if config.key in changes:
            value, lo, hi = changes[config.key]
            stat = replace(config.stats["drift"], change=RelativeChange(value, lo, hi))
            data = with_config(data, index, replace(config, stats={**config.stats, "ptVal": stat}))
    return data


def test_ptval_worse_in_every_configuration_is_said_with_each_change_the_chosen_first():
    data = with_ptval(report(), {"replay-n0": (0.49, 0.40, 0.58), "replay-n6": (0.55, 0.47, 0.62)})
    said = _by_state(data)
    assert said["worse everywhere ptVal"] == (
        "Portuguese text got worse in every configuration: ptVal +55.0% [+47.0%,+62.0%] (replay-n6, chosen), "
        "+49.0% [+40.0%,+58.0%] (replay-n0) over seeds x lines vs step 0.")
    assert said["replay-n6 ptVal"] == ("replay-n6: ptVal change rose (its perplexity rose: worse), "
                                       "+55.0% [+47.0%,+62.0%] over seeds x lines vs step 0.")
    assert "replay-n0 ptVal" in conclusions(data).changes  # in the conclusion set the kernel test compares
    order = [s.states for s in what_it_says(data)]
    assert order.index("replay-n6 ptVal") < order.index("replay-n0 ptVal")  # the chosen configuration first
    # worse in one configuration only: its own sentence, no "every configuration"
    data = with_ptval(data, {"replay-n0": (0.01, -0.02, 0.04)})
    said = _by_state(data)
    assert "worse everywhere ptVal" not in said and "replay-n0 ptVal change +1.0% [-2.0%,+4.0%]" in said["not resolved"]


def test_perplexity_never_says_learned():
    data = report()
    text = paragraph(data)
    assert "sftHeld change fell (the held-out pairs' perplexity fell)" in text
    assert "learned" not in text


def test_the_paragraph_read_back_from_report_json_is_the_one_written(tmp_path):
    """The demo prints the paragraph from the report it just computed; the page and `tatu sweep report`
    write it from report.json, whose sets are stored sorted. Sets held in another order (ptVal, then
    held-out sets after it) say the same sentences in the same order either way."""
    from tatu.sweep.judge.sweep_report import read_report_json, write_report_json

    data = report()
    config = data.compare.configs[0]
    stats = dict(config.stats)
    stats["ptVal"] = replace(next(iter(stats.values())), change=RelativeChange(0.04, 0.02, 0.06))
    stats["ptNews"] = replace(stats["ptVal"], change=RelativeChange(-0.03, -0.05, -0.01))
    stats["ptFaq"] = replace(stats["ptVal"], change=RelativeChange(0.02, 0.01, 0.03))
    data = with_config(data, 0, replace(config, stats=stats))
    read = read_report_json(write_report_json(tmp_path, data))
    assert list(read.compare.configs[0].stats) != list(stats)  # the file's order is not the one held
    assert paragraph(read) == paragraph(data)
    said = [s.states for s in what_it_says(data)]
    assert [s for s in said if s.endswith(("ptVal", "ptFaq", "ptNews"))] == [
        f"{config.key} ptVal", f"{config.key} ptFaq", f"{config.key} ptNews"]
