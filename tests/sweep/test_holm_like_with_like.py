"""Like with like in the Holm families and report.json (issue 43 item 1): a baseline whose seeds all
abort at step 8 against one configuration that also ends at 8 and one that runs to 24. At the ends,
only the comparison at equal ends (8 vs 8) is tested, so the ends' Holm family holds it alone; the
24-vs-8 one carries both ends and why, no p Holm, and prints no p. At the common step (8) both are
compared, each with its step, Holm over the two. report.json keeps the step and the reason."""
from __future__ import annotations

import re
from pathlib import Path
from dataclasses import replace

import numpy as np
from page_world import sweep_data
from run_records import sweep_report

from tatu.sweep.judge.analysis import add_paired
from tatu.sweep.judge.common_step import AT_COMMON, START
from tatu.sweep.judge.records import ConfigResult, MemberResult, PairedDiff
from tatu.sweep.judge.vs_parent import VsParent, vs_parent
from tatu.sweep.plan.interpolate import InterpolateSpec, interpolated_key
from tatu.sweep.report import tables
from tatu.sweep.report.page import write_page

N_LINES = 30


def _scores(seed: int, set_name: str, growth: float) -> dict:
    lines = np.random.default_rng(len(set_name))  # the set's lines: the same for every member
    tokens = lines.integers(5, 30, N_LINES)
    noise = np.random.default_rng(seed * 7 + int(growth * 1000)).normal(0, 0.02, N_LINES)
    return {"nll_sum": (tokens * 2.0 * growth * (1 + noise)).tolist(), "line_tokens": tokens.tolist(),
            "line_index": list(range(N_LINES))}


def _member(key: str, seed: int, steps: int, state: str, end_growth: float, common_growth: float) -> MemberResult:
    start = {s: _scores(0, s, 1.0) for s in ("enRuler", "sftHeld")}
    lines = {"base": start, START: start,
             "end": {s: _scores(seed, s, end_growth + 0.01 * seed) for s in ("enRuler", "sftHeld")},
             AT_COMMON: {s: _scores(seed + 50, s, common_growth + 0.01 * seed) for s in ("enRuler", "sftHeld")}}
    return MemberResult(member=f"{key}-s{seed}", config=key, seed=seed, values={"REPLAY_N": key[-1]}, state=state,
                        verdict=None, steps=steps, lines=lines)


def _config(key: str, steps: int, state: str, end_growth: float, common_growth: float) -> ConfigResult:
    results = tuple(_member(key, seed, steps, state, end_growth, common_growth) for seed in (1, 2, 3))
    return ConfigResult(key=key, values={"REPLAY_N": key[-1]}, results=results, stats={"drift": None, "sftHeld": None},
                        categories=None, stats_common={"drift": None, "sftHeld": None}, categories_common=None, common_step=8,
                        common_missing=None, end_steps=(steps,), trainable=None, effective={}, half=None)


def _paired():
    configs = [_config("replay-n0", 8, "aborted", 1.3, 1.3), _config("replay-n2", 8, "aborted", 1.2, 1.2),
               _config("replay-n6", 24, "done", 0.8, 1.1)]
    return {c.key: c for c in add_paired({"REPLAY_N": "0"}, configs)}


def test_the_ends_holm_family_holds_only_comparisons_at_equal_ends():
    configs = _paired()
    unequal, equal = configs["replay-n6"].paired["drift"], configs["replay-n2"].paired["drift"]
    assert equal.n_compared == 1 and equal.p_holm == equal.p_value  # a family of one: Holm leaves p alone
    assert unequal.p_holm is None and unequal.n_compared is None
    assert unequal.unequal == "24 vs 8 (aborted at 8)" and unequal.step is None
    assert equal.unequal is None and equal.step == 8
    for key in ("replay-n2", "replay-n6"):  # at the common step both are compared, with their step
        common = configs[key].paired_common["sftHeld"]
        assert common.step == 8 and common.unequal is None and common.n_compared == 2


def test_report_json_keeps_each_comparisons_step_and_why():
    configs = _paired()
    written = configs["replay-n6"].paired["drift"].to_json()
    assert written["unequal"] == "24 vs 8 (aborted at 8)" and "p_holm" not in written
    assert PairedDiff.from_json(written) == configs["replay-n6"].paired["drift"]
    assert configs["replay-n6"].paired_common["drift"].to_json()["step"] == 8


def test_a_row_at_unequal_ends_prints_no_p_and_the_table_says_why():
    configs = list(_paired().values())
    rows = {r[0]: r for r in tables.paired_rows(configs)}
    assert rows["replay-n6"][2] == "24 vs 8 (aborted at 8): unequal ends"
    assert rows["replay-n6"][4:6] == ["-", "-"] and rows["replay-n6"][7:9] == ["-", "-"]
    assert rows["replay-n2"][2] == "8" and rows["replay-n2"][4] != "-"
    assert {r[2] for r in tables.paired_rows(configs, common=True)} == {"8"}
    assert tables.UNEQUAL_NOTE in "\n".join(tables._paired_text(configs, common=False))


def _walked_back(parent: ConfigResult, key: str, shrink: float, steps: dict[int, int]) -> ConfigResult:
    """An interpolated configuration: each seed's member at the step `steps` gives it (its parent's)."""
    results = tuple(replace(r, member=f"{key}-s{r.seed}", config=key, interpolated=True, steps=steps[r.seed],
                            lines={**r.lines, "end": {s: {**v, "nll_sum": (np.asarray(v["nll_sum"]) * shrink).tolist()}
                                                      for s, v in r.lines["end"].items()}})
                    for r in parent.results)
    return replace(parent, key=key, results=results, end_steps=tuple(sorted(set(steps.values()))))


def test_vs_parent_says_each_pairs_step_and_holds_a_pair_at_unequal_steps_out_of_holm():
    parent = _config("full", 24, "done", 0.8, 1.1)
    parent = replace(parent, results=tuple(replace(r, steps=8 if r.seed == 1 else 24) for r in parent.results))
    own = {r.seed: r.steps for r in parent.results}
    spec = InterpolateSpec("full", (0.5, 0.25))
    good = _walked_back(parent, interpolated_key("full", 0.5), 0.97, own)
    off = _walked_back(parent, interpolated_key("full", 0.25), 0.95, {**own, 1: 24})  # seed 1: 24 against 8
    rows = {r.alpha: r for r in vs_parent(spec, [parent, good, off])}
    assert rows[0.5].steps == (8, 24)  # the parent's seeds ended apart; each pair at its own
    assert rows[0.25].steps is None
    assert rows[0.5].paired["drift"].n_compared == 1  # the pair at unequal steps is in no family
    assert rows[0.25].paired["drift"].unequal and rows[0.25].paired["drift"].p_holm is None
    assert VsParent.from_json(rows[0.5].to_json()) == rows[0.5]
    _, table = tables.vs_parent_table(tuple(rows.values()))
    assert table[0][2] == "8,24 (each seed at its own end)" and table[1][2] == "n/a"
    assert table[1][4:6] == ["-", "-"]


def test_the_pages_first_paired_table_is_at_the_common_step(tmp_path):
    configs = [c.without_lines() for c in _paired().values()]
    page = write_page(sweep_report(sweep_data().verdict, configs), "", [], tmp_path).read_text()
    first = page.split("<h2>Paired by seed and line vs the baseline", 1)[1]
    assert first.startswith(" (Holm), at step 8, the last eval step every member reached")
    like = re.search(r'id="paired-like".*?</table>', first, re.S).group(0)
    assert "unequal ends" not in like and "replay-n6" in like
    ends = re.search(r'id="paired".*?</table>', page, re.S).group(0)  # the ends' table after it, marked
    assert page.index('id="paired-like"') < page.index('id="paired"')
    assert "24 vs 8 (aborted at 8): unequal ends" in ends


def test_no_seeds_for_are_offered_for_a_difference_at_unequal_ends():
    from tatu.sweep.judge.power import seeds_for_effect
    from tatu.sweep.plan.rule import parse_rule

    rule = parse_rule("smallest REPLAY_N such that drift_hi < 5%", {"REPLAY_N": ["0", "2", "6"]}, Path("plan.toml"))
    rows = seeds_for_effect(rule, list(_paired().values()), 0.02).rows
    compared = {r.config for r in rows if r.vs}
    assert compared == {"replay-n2"}  # replay-n6's 24 vs 8 is not a comparison to power
