"""The run report at six runs (3 seeds x 2 configurations, as `make demo` calls it): runs grouped by
the sweep configuration their sweep's lock names, one colour, one band and one sentence per
configuration, each band the crossed CI of evals/seeds/stats.py recomputed here from the per-line
files, the env-file path said once; runs that are no sweep's members stay groups of their own."""
from __future__ import annotations

import html
import json
import math
import re

import numpy as np
import pytest

from page_world import N_LINES, SWEEP_NAME, report_runs, seed_member_runs
from tatu.evals.seeds.stats import RunLines, crossed_ci
from tatu.formats import fmt_ci
from tatu.ops.report.groups import BAND_RESAMPLES, group_runs
from tatu.ops.report.page import build_report, load_run, render_plots


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    root = tmp_path_factory.mktemp("six")
    runs = seed_member_runs(root)
    return {"runs": runs, "index": build_report(runs, root / "out"), "root": root}


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_member_runs_group_by_the_configuration_their_lock_names_and_other_runs_stand_alone(six, tmp_path):
    groups = group_runs([load_run(d) for d in six["runs"]])
    assert [(g.name, g.seeds, g.sweep, len(g.runs)) for g in groups] == [
        ("replay-n0", (1, 2, 3), SWEEP_NAME, 3), ("replay-n6", (1, 2, 3), SWEEP_NAME, 3)]
    two = report_runs(tmp_path)
    alone = group_runs([load_run(two["finished"]), load_run(two["running"])])
    assert [(g.name, g.is_configuration) for g in alone] == [("sft-noreplay", False), ("sft-replay", False)]


def _independent_change(run_dirs, set_name: str, step: int):
    """The crossed CI of the change vs step 0 at `step`, from the per-line files read here."""
    def lines(run_dir, at):
        doc = json.loads((run_dir / "evals" / f"step-{at:06d}.json").read_text())["sets"][set_name]["lines"]
        return np.array(doc["nll_sum"]), np.array(doc["n_tokens"], dtype=float)
    runs = [RunLines(*lines(d, 0), *lines(d, step)) for d in run_dirs]
    ci = crossed_ci(runs, n_resamples=BAND_RESAMPLES, seed=0)
    return math.expm1(ci.mean), math.expm1(ci.lo), math.expm1(ci.hi)


def test_one_sentence_per_configuration_with_its_crossed_ci_and_each_seed_below(six):
    page = six["index"].read_text(encoding="utf-8")
    lead = page[page.index('<section id="lead">'):page.index("</section>")]
    sentences = re.findall(r'<p class="verdict-sentence" data-config="([^"]+)">(.*?)</p>', lead)
    assert [name for name, _ in sentences] == ["replay-n0", "replay-n6"]
    n0 = [d for d in six["runs"] if ".replay-n0-" in d.name]
    # the seeds that aborted at step 4 make step 4 the last eval every replay-n0 seed reached
    drift, sft = _independent_change(n0, "enRuler", 4), _independent_change(n0, "sftHeld", 4)
    assert _text(sentences[0][1]) == (f"replay-n0 (seeds 1, 2, 3): 3 of 3 seeds forget; drift {fmt_ci(*drift)} and sftHeld "
                                      f"{fmt_ci(*sft)} over seeds x lines at step 4, the last eval every seed reached, "
                                      "against MIX_FORGET_LIMIT +10.0%.")
    assert _text(sentences[1][1]).startswith("replay-n6 (seeds 1, 2, 3): 3 of 3 seeds hold; drift ")
    seeds = re.findall(r'<li class="seed-sentence" data-run="([^"]+)">', lead)
    assert seeds == [d.name for d in six["runs"]]
    # the env file's path: said once (its directory), never once per seed
    env_dir = str(six["root"] / "sweeps" / SWEEP_NAME / "env")
    assert _text(lead).count(env_dir) == 1 and f"{env_dir}/" not in _text(lead)
    assert "--env-file <run>.env" in _text(lead)
    # and nowhere below it either (the verdict scope and comparison lists name <run>.env)
    assert _text(page).count(env_dir) == 1


def test_each_plot_has_one_band_per_configuration_each_its_own_colour(six, tmp_path):
    plots = render_plots([load_run(d) for d in six["runs"]], tmp_path)
    assert [p.name for p in plots] == ["sftHeld.png", "ptVal.png", "enRuler.png", "drift.png"]
    for plot in plots:
        assert len(plot.bands) == 2 and len(set(plot.bands)) == 2, (plot.name, plot.bands)
        legend = [label for label in plot.legend if "95% CI of the mean over seeds x lines" in label]
        assert [label.split(":")[0] for label in legend] == ["replay-n0", "replay-n6"], plot.legend
        # seeds are thin lines: one legend entry per configuration, not one per seed
        assert not any(".replay-n" in label for label in plot.legend), plot.legend


def test_the_drift_band_at_a_step_is_the_crossed_ci_of_the_seeds_there(six, tmp_path):
    from tatu.ops.report.groups import crossed_band

    group = group_runs([load_run(d) for d in six["runs"]])[1]  # replay-n6: every seed reaches step 8
    band = crossed_band(group, "enRuler", "change")
    at = band.steps.index(8)
    expected = _independent_change([r.run_dir for r in group.runs], "enRuler", 8)
    assert (band.mean[at], band.lo[at], band.hi[at]) == pytest.approx([x * 100 for x in expected])
    assert band.n_seeds[at] == 3 and band.steps[0] == 0 and band.lo[0] == band.hi[0] == 0.0
