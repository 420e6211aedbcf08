"""Like with like (issue 43 items 1 and 6): a baseline whose seeds all abort at step 8 against a
configuration that runs to 24. The paired comparison the closing output, the page's tables and the
prose state is the one at the common step (8), with its step printed; the end-against-end one
(24 vs 8) is printed with both ends and why, and the prose gives it no direction. Outlier flags:
none below 4 seeds (the others' spread has 1 df there), said so in the cell, the metric named."""
from __future__ import annotations

import math
from dataclasses import replace

from page_world import sweep_config, sweep_data, stats
from run_records import sweep_report

from tatu.records import LogRatio
from tatu.sweep.judge.records import Outlier, PairedDiff
from tatu.sweep.report import tables
from tatu.sweep.report.conclusions import conclusions
from tatu.sweep.report.prose import paragraph

from tatu.ops.demo import closing_table


def _paired(rel: float, half_width: float) -> PairedDiff:
    value = math.log1p(rel)
    return PairedDiff(change=LogRatio(value, value - half_width, value + half_width), p_value=0.01, t=3.0, df=4.0,
                      n_seeds=3, seed_sd=0.01, mde=0.02, parts=None, p_holm=0.02, n_compared=1)


def _aborted_baseline_report():
    """replay-n0: every seed aborted at 8; replay-n6: 24 steps. At the ends sftHeld reads -16.4%
    (24 steps against 8); at step 8, the common step, +2.6% (replay learned less per step)."""
    data = sweep_data()
    base, replay = data.compare.configs
    base = replace(base, end_steps=(8,), common_step=8, common_missing=None, stats_common=base.stats,
                   results=tuple(replace(r, state="aborted", steps=8) for r in base.results))
    replay = replace(replay, end_steps=(24,), common_step=8, common_missing=None, stats_common=replay.stats,
                     results=tuple(replace(r, steps=24) for r in replay.results),
                     paired={"drift": _paired(-0.80, 0.02), "sftHeld": _paired(-0.164, 0.02)},
                     paired_common={"drift": _paired(-0.50, 0.02), "sftHeld": _paired(0.026, 0.01)})
    return sweep_report(data.verdict, [base, replay], question=data.question)


def test_the_closing_paired_table_is_at_the_common_step_with_its_step():
    report = _aborted_baseline_report()
    text = closing_table(report)
    paired = text.split("paired by seed and line vs the baseline", 1)[1].split(tables.HELD_OUT_NOTE, 1)[0]
    assert "at step 8, the last eval step every member reached" in paired
    row = next(line for line in paired.splitlines() if line.startswith("replay-n6"))
    assert row.split()[2] == "8" and "+2.6%" in row and "-16.4%" not in row


def test_a_paired_row_at_unequal_ends_prints_both_ends_and_why():
    configs = list(_aborted_baseline_report().compare.configs)
    (row,) = tables.paired_rows(configs)
    assert row[2] == "24 vs 8 (aborted at 8): unequal ends"
    (common,) = tables.paired_rows(configs, common=True)
    assert common[2] == "8"


def test_the_prose_states_the_common_step_comparison_and_no_direction_at_unequal_ends():
    report = _aborted_baseline_report()
    text = paragraph(report)
    assert "replay-n6 vs replay-n0 at step 8, paired by seed and line: sftHeld change higher, +2.6%" in text
    assert "-16.4%" not in text  # the 24-against-8 difference is never stated
    assert conclusions(report).changes["replay-n6 - baseline sftHeld"].lo > 0
    # without common-step lines the ends are all there is: shown, both ends and why, with no direction
    configs = [replace(c, paired_common=None) for c in report.compare.configs]
    ends_only = replace(report, compare=replace(report.compare, configs=tuple(configs)))
    text = paragraph(ends_only)
    assert "Compared at unequal ends, so no direction is claimed: replay-n6 vs replay-n0 enRuler drift" in text
    assert "replay-n6 vs replay-n0 sftHeld change difference -16.4% [-18.1%,-14.7%] (steps 24 vs 8 (aborted at 8))" in text
    assert "sftHeld change lower" not in text
    assert "replay-n6 - baseline sftHeld" not in conclusions(ends_only).changes


def test_outlier_cells_name_the_metric_and_say_n_a_below_4_seeds():
    three = sweep_config("replay-n6", "6")
    flagged = replace(three.stats["sftHeld"], outliers=(Outlier(1, 156.6),))
    three = replace(three, stats={**three.stats, "sftHeld": flagged})
    assert tables.config_rows([three])[0][-1] == "n/a (3 seeds)"
    per_seed = {"1": 0.03, "2": 0.04, "3": 0.035, "4": 0.2}
    four = replace(three, stats={"drift": replace(stats(per_seed), outliers=(Outlier(4, 9.1),)),
                                 "sftHeld": stats(per_seed)})
    assert tables.config_rows([four])[0][-1] == "drift s4 (t=+9.1)"
    assert "n/a below 4 seeds" in tables.OUTLIER_NOTE
