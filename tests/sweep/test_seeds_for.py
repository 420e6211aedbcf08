"""The report's "seeds for MDE" lines (sweep/judge/power.py): per judged metric of each configuration and
per paired comparison with the baseline, from synthetic members' per-line scores (fast: no run),
checked against a plain loop over the seed count with scipy's t; the plan's `[decision] mde`
through the plan, its hash and the lock; the closing text and the page."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sp

from run_records import config_result, member_result, sweep_report
from tatu.sweep.judge.analysis import add_paired
from tatu.sweep.report.page import write_page
from tatu.sweep.judge.power import DEFAULT_MDE, seeds_for_effect
from tatu.sweep.judge.records import ConfigResult, SweepVerdict
from tatu.sweep.plan.rule import parse_rule
from tatu.sweep.judge.sets import set_stats
from tatu.sweep.report.tables import FLOOR_NOTE, closing_text, power_lines

N_LINES = 80
RULE = "smallest REPLAY_N such that drift_hi < MIX_FORGET_LIMIT and ptFaq_change_hi < 0.2"


def _scores(nll) -> dict:
    return {"nll_sum": list(nll), "line_tokens": [1] * N_LINES, "line_index": list(range(N_LINES))}


def _configs(shared_line_sd: float = 0.01) -> list[ConfigResult]:
    """Two configurations x 3 seeds: per line, a start and an end on enRuler, sftHeld and ptFaq;
    the change has a seed part, a shared-line part (the same for every seed) and seed x line noise."""
    rng = np.random.default_rng(11)
    start = {name: rng.gamma(3.0, 1.0, N_LINES) for name in ("enRuler", "sftHeld", "ptFaq")}
    line_effect = {name: shared_line_sd * rng.standard_normal(N_LINES) for name in start}
    configs = []
    for replay, shift in (("0", 0.08), ("2", 0.03)):
        results = []
        for seed in (1, 2, 3):
            seed_effect = 0.02 * rng.standard_normal()
            end = {name: start[name] + shift + seed_effect + line_effect[name] + 0.03 * rng.standard_normal(N_LINES)
                   for name in start}
            results.append(member_result(f"replay-n{replay}", seed, {n: _scores(v) for n, v in start.items()},
                                         {n: _scores(v) for n, v in end.items()}))
        stats, _ = set_stats(results, None, len(configs))
        configs.append(config_result(f"replay-n{replay}", {"REPLAY_N": replay}, results, stats,
                                     common_missing="none kept"))
    return add_paired({"REPLAY_N": "0"}, configs)


def _naive_seeds(parts: dict, effect: float) -> int | None:
    """The fewest n whose (t_.975 + t_.8) * SE(n) is at most log1p(effect), by a plain loop; SE^2 =
    (sigma_a^2 + sigma_e^2/L)/n + sigma_b^2/L, df by Satterthwaite over the parts present."""
    target = math.log1p(effect)
    for n in range(2, 5000):
        inter = parts["interaction"] / n
        seed_ms, line_ms = parts["seed"] / n + inter, parts["lines"] + inter
        has_seed, has_line = parts["seed"] > 0, parts["lines"] > 0
        var = (seed_ms if has_seed else 0) + (line_ms if has_line else 0) + (1 - has_seed - has_line) * inter
        spread = ((seed_ms ** 2 / (n - 1) if has_seed else 0) + (line_ms ** 2 / (parts["n_lines"] - 1) if has_line else 0)
                  + ((1 - has_seed - has_line) * inter) ** 2 / ((n - 1) * (parts["n_lines"] - 1)))
        df = var ** 2 / spread
        if (sp.t.ppf(0.975, df) + sp.t.ppf(0.8, df)) * math.sqrt(var) <= target:
            return n
    return None


def _rule(tmp_path: Path):
    return parse_rule(RULE, {"REPLAY_N": ["0", "2"]}, tmp_path / "p.toml")


def test_every_judged_metric_and_comparison_gets_its_seed_count(tmp_path):
    configs = _configs()
    seeds_for = seeds_for_effect(_rule(tmp_path), configs, DEFAULT_MDE)
    rows = {(r.config, r.vs, r.metric): r for r in seeds_for.rows}
    # drift, sftHeld and the held-out set the rule names, per configuration; drift and sftHeld per comparison
    assert list(rows) == [("replay-n0", None, "drift"), ("replay-n0", None, "sftHeld"), ("replay-n0", None, "ptFaq"),
                          ("replay-n2", None, "drift"), ("replay-n2", None, "sftHeld"), ("replay-n2", None, "ptFaq"),
                          ("replay-n2", "replay-n0", "drift"), ("replay-n2", "replay-n0", "sftHeld")]
    by_key = {c.key: c for c in configs}
    for (config, vs, metric), row in rows.items():
        stats = (by_key[config].paired if vs else by_key[config].stats)[metric]
        assert row.seeds == _naive_seeds(dataclasses.asdict(stats.parts), DEFAULT_MDE), row
        assert row.n_seeds == 3 and row.n_lines == N_LINES and row.known
    assert all(r.seeds is not None for r in rows.values()) and max(r.seeds for r in rows.values()) > 3
    # a larger stated effect needs fewer seeds
    wider = seeds_for_effect(_rule(tmp_path), configs, 0.05)
    assert all(w.seeds <= r.seeds for w, r in zip(wider.rows, seeds_for.rows))
    assert any(w.seeds < r.seeds for w, r in zip(wider.rows, seeds_for.rows))


def test_shared_lines_that_alone_exceed_the_effect_say_no_seed_count_resolves_it(tmp_path):
    configs = _configs(shared_line_sd=0.15)
    seeds_for = seeds_for_effect(_rule(tmp_path), configs, DEFAULT_MDE)
    own = [r for r in seeds_for.rows if r.vs is None]
    assert all(r.seeds is None and r.line_floor > DEFAULT_MDE for r in own), own
    assert all(_naive_seeds(dataclasses.asdict(c.stats[m].parts), DEFAULT_MDE) is None for c in configs for m in ("drift", "sftHeld", "ptFaq"))
    text = "\n".join(power_lines(seeds_for))
    print(text)  # docs/sweeps.md shows a line of it (pytest -s)
    floor = own[0].line_floor * 100
    assert (f"replay-n0 drift: MDE {own[0].mde_now * 100:.1f}% at 3 seeds; seeds for MDE 2%: none with these 80 lines "
            f"(floor {floor:.1f}%)") in text, text
    assert text.count("the shared lines alone allow") == 1 and text.endswith(FLOOR_NOTE), text  # said once, under the block


def test_the_closing_text_and_the_page_print_the_power_lines(tmp_path):
    configs = _configs()
    assert [c.is_baseline for c in configs] == [True, False]
    seeds_for = seeds_for_effect(_rule(tmp_path), configs, 0.025)
    data = sweep_report(SweepVerdict(RULE, "REPLAY_N", "end", None, "2", "REPLAY_N=2: ...", (), ()), configs,
                        question="q", seeds_for=seeds_for)
    text = closing_text(data)
    print("\n".join(power_lines(data.seeds_for)))  # docs/sweeps.md shows it (pytest -s)
    block = text.split("seeds for MDE 2.5% (80% power: the 95% CI, seeds x lines", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    drift = seeds_for.rows[0]
    assert block[0] == (f"  replay-n0 drift: MDE {drift.mde_now * 100:.1f}% at 3 seeds; "
                        f"seeds for MDE 2.5%: {drift.seeds}")
    paired = seeds_for.rows[-2]
    assert block[-2] == (f"  replay-n2 vs replay-n0 drift diff: MDE {paired.mde_now * 100:.1f}% at 3 seeds; "
                         f"seeds for MDE 2.5%: {paired.seeds}")
    assert len(block) == len(seeds_for.rows)
    # every CI header says what it covers
    assert "drift [95% CI, seeds x lines]" in text and "drift diff [95% CI, seeds x lines]" in text
    assert "change [95% CI, seeds x lines]" in text  # the held-out sets' table
    page = write_page(data, text, [], tmp_path).read_text()
    assert '<ul id="seeds-for">' in page and f"seeds for MDE 2.5%: {drift.seeds}</li>" in page
    assert "sftHeld change [95% CI, seeds x lines]" in page


def test_a_plan_states_its_effect_and_a_plan_without_it_hashes_as_before(tmp_path):
    from sweep_world import plan_text

    from tatu.sweep.plan.lock import reconcile
    from tatu.sweep.plan.load import load_plan

    text = plan_text("dose", Path("data"), Path("runs/trunk/final"))
    plain, stated, same = (tmp_path / "plain.toml", tmp_path / "stated.toml", tmp_path / "same.toml")
    plain.write_text(text)
    stated.write_text(text.replace("[decision]\n", '[decision]\nmde = "5%"\n'))
    same.write_text(text.replace("[decision]\n", "[decision]\nmde = 0.05\n"))
    a, b, c = load_plan(plain), load_plan(stated), load_plan(same)
    assert "mde" not in a.core() and a.mde is None  # absent: the hash every earlier plan had
    assert b.mde == pytest.approx(0.05) and b.hash != a.hash and b.hash == c.hash
    lock, _ = reconcile(b, tmp_path / "sweeps" / "dose")
    assert lock.plan.mde == pytest.approx(0.05) and lock.plan.hash == b.hash
    assert reconcile(a, tmp_path / "sweeps" / "plain")[0].plan.mde is None
    assert "mde" not in json.loads((tmp_path / "sweeps" / "plain" / "plan.lock.json").read_text())  # as before mde
