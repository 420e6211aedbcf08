"""Members compared at the common step, and the report's numbers recomputed from the run dirs.

Two configurations that end at different steps (MIX_STEPS_LIMIT 4 and 6, an axis: their ends
differ the way an aborted member's and a finished one's do), two seeds each. The report's
per-configuration means and paired differences (with a p that agrees with their CI) are recomputed here with plain loops from the members'
per-line scores: at the end from the checkpoints re-scored here on the CPU (the report reads the
daemon's own per-line files at its last eval: on CPU fp32 the same numbers, so a second scorer that
drifted from the daemon's would fail here), at the common step from the daemon's files
(RUN_DIR/evals/step-N.json)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sweep_world import assert_paired_p_agrees_with_ci, plan_world, run_through, steps_plan_text

from tatu.sweep.plan.lock import read_lock

pytestmark = pytest.mark.slow

RULE = "smallest MIX_STEPS_LIMIT such that drift < 50% at the common step"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_trunk):
    root, plan = plan_world(tmp_path_factory, tiny_trunk, "steps",
                            text=steps_plan_text("steps", tiny_trunk["data"], tiny_trunk["trunk"], RULE))
    run_through(plan, root / "sweeps", "4/4 done")
    return root / "sweeps" / "steps"


def _log_ratio(start: dict, end: dict) -> float:
    """log(ppl_end / ppl_start) by hand, after checking both scored the same lines."""
    assert start["line_index"] == end["line_index"]
    nll_s = tok_s = nll_e = tok_e = 0.0
    for i in range(len(start["nll_sum"])):
        nll_s, tok_s = nll_s + start["nll_sum"][i], tok_s + start["line_tokens"][i]
        nll_e, tok_e = nll_e + end["nll_sum"][i], tok_e + end["line_tokens"][i]
    return nll_e / tok_e - nll_s / tok_s


def _daemon_lines(run: Path, step: int) -> dict:
    sets = json.loads((run / "evals" / f"step-{step:06d}.json").read_text())["sets"]
    return {name: {"nll_sum": s["lines"]["nll_sum"], "line_tokens": s["lines"]["n_tokens"], "line_index": s["lines"]["index"]}
            for name, s in sets.items()}


def test_every_comparison_is_also_made_at_the_common_step_and_the_rule_judges_there(sweep):
    from tatu.sweep.judge.analysis import analyze
    from tatu.sweep.report.tables import closing_text

    data = analyze(sweep)
    configs = {c.key: c for c in data.compare.configs}
    assert configs["mix-steps-limit4"].end_steps == (4,) and configs["mix-steps-limit6"].end_steps == (6,)
    assert {c.common_step for c in configs.values()} == {4}
    lock = read_lock(sweep)
    naive = {}
    for m in lock.members_of("compare"):
        run = Path(m.env["TATU_OUT"]) / m.run
        start, at_4 = _daemon_lines(run, 0), _daemon_lines(run, 4)
        naive[m.config_key, m.seed] = _log_ratio(start["enRuler"], at_4["enRuler"])
        # The daemon's kept lines are the eval it logged at step 4.
        event = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines() if '"eval"' in x and '"step": 4,' in x]
        logged = event[-1]["drift"]["value"]
        assert math.expm1(naive[m.config_key, m.seed]) == pytest.approx(logged, abs=1e-9)
    for key, config in configs.items():
        mean = (naive[key, 1] + naive[key, 2]) / 2
        assert config.stats_common["drift"].log_mean == pytest.approx(mean, abs=1e-12)
        assert config.metrics_common["drift"] == pytest.approx(math.expm1(mean), abs=1e-12)
    paired = configs["mix-steps-limit6"].paired_common["drift"]
    diffs = [naive["mix-steps-limit6", s] - naive["mix-steps-limit4", s] for s in (1, 2)]
    assert_paired_p_agrees_with_ci(paired, diffs)
    assert data.verdict.at == "common" and data.verdict.at_step == 4
    assert data.verdict.chosen == "4"
    text = closing_text(data)
    assert "at step 4, the last eval step every member reached" in text
    assert "(judged at step 4, the common step)" in text
    end_table = text.split("comparison stage", 1)[1].split("outlier seeds:", 1)[0]
    assert any(line.startswith("mix-steps-limit6") and "  6  " in line for line in end_table.splitlines())
    # The seeds for the default MDE, where the rule judges (the common step), from its parts there.
    from tatu.evals.seeds import power as seeds_power

    seeds_for = data.seeds_for
    assert (seeds_for.at, seeds_for.effect) == ("common", 0.02)
    row = next(r for r in seeds_for.rows if (r.config, r.vs, r.metric) == ("mix-steps-limit4", None, "drift"))
    parts = configs["mix-steps-limit4"].stats_common["drift"].parts
    assert row.seeds == seeds_power.seeds_needed(parts, math.log1p(0.02)) and row.n_seeds == 2
    assert "seeds for MDE 2% (80% power: the 95% CI, seeds x lines" in text and "at the common step, where the rule judges" in text
    assert "  mix-steps-limit6 vs mix-steps-limit4 drift diff: MDE " in text


def test_the_end_means_and_paired_differences_recompute_from_the_rescored_lines(sweep):
    from tatu.sweep.judge.analysis import analyze
    from tatu.sweep.judge.scores import score_checkpoint

    data = analyze(sweep)
    configs = {c.key: c for c in data.compare.configs}
    lock = read_lock(sweep)
    per_seed = {}
    for m in lock.members_of("compare"):
        run = Path(m.env["TATU_OUT"]) / m.run
        base = score_checkpoint(Path(m.env["TATU_SEED_CKPT"]), m.env, sweep / "scores")  # re-scored: equal to the daemon's lines the report reads (CPU fp32)
        end = score_checkpoint(run / "final", m.env, sweep / "scores")
        for set_name in ("enRuler", "sftHeld"):
            per_seed[m.config_key, set_name, m.seed] = _log_ratio(base[set_name], end[set_name])
    for key, config in configs.items():
        for metric, set_name in (("drift", "enRuler"), ("sftHeld", "sftHeld")):
            mean = (per_seed[key, set_name, 1] + per_seed[key, set_name, 2]) / 2
            assert config.stats[metric].log_mean == pytest.approx(mean, abs=1e-12)
    for metric, set_name in (("drift", "enRuler"), ("sftHeld", "sftHeld")):
        diffs = [per_seed["mix-steps-limit6", set_name, s] - per_seed["mix-steps-limit4", set_name, s] for s in (1, 2)]
        assert_paired_p_agrees_with_ci(configs["mix-steps-limit6"].paired[metric], diffs)
