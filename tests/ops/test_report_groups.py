"""The run report at six runs (3 seeds x 2 configurations, as `make demo` calls it): runs grouped by
the sweep configuration their sweep's lock names, one colour, one band and one sentence per
configuration, each band the crossed CI of evals/seeds/stats.py recomputed here from the per-line
files, the env-file path said once; runs that are no sweep's members stay groups of their own."""
from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from sentences import clauses, page_text, repeated
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


# --- read at a glance (issue 44 item 4): each clause said at most twice, one colour per configuration,
# every line and marker in the legend, labels apart

CONFIGURATIONS = ("replay-n0", "replay-n6")


def test_no_clause_is_said_more_than_twice(six):
    """The caveats (what a CI covers, what a verdict judges, the criteria) and the plots' captions
    are said once, not once per seed or per plot: no clause of four words or more on the page
    (folded tables included, the model's quoted outputs not) more than twice."""
    text = page_text(six["index"].read_text(encoding="utf-8"))
    assert clauses(text) and repeated(text) == {}


def _drawn(runs, out, monkeypatch) -> dict:
    """{PNG name: axes} of every figure the report draws, caught as it is saved."""
    from tatu.ops.report import picture, plots

    caught = {}
    for module in (plots, picture):
        def catch(fig, ax, path, *args, _save=module.save, **kwargs):
            drawn = _save(fig, ax, path, *args, **kwargs)
            caught[Path(path).name] = ax
            return drawn
        monkeypatch.setattr(module, "save", catch)
    build_report(runs, out)
    monkeypatch.undo()
    return caught


def _style(artist) -> tuple:
    """What a reader tells an artist by: a line's colour, marker and dashes (a mark's fill colour), an area's colour."""
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D

    if isinstance(artist, Line2D):
        bare = artist.get_linestyle() in ("None", "none", "", " ")
        colour = artist.get_markerfacecolor() if bare else artist.get_color()
        return ("line", to_hex(colour, keep_alpha=False), artist.get_marker(), artist.get_linestyle(),
                round(artist.get_linewidth(), 1))
    return ("area", to_hex(artist.get_facecolor()[0], keep_alpha=False))


def _reference(artist) -> bool:
    """The picture's grey zero lines: axes, not data."""
    from matplotlib.colors import to_hex

    return _style(artist)[0] == "line" and to_hex(artist.get_color()) == "#808080"


def test_every_line_and_mark_drawn_has_a_legend_entry_in_its_configurations_one_colour(six, tmp_path, monkeypatch):
    drawn = _drawn(six["runs"], tmp_path / "out", monkeypatch)
    assert sorted(drawn) == sorted(["learning_vs_forgetting.png", "sftHeld.png", "ptVal.png", "enRuler.png", "drift.png"])
    for name, ax in drawn.items():
        handles, labels = ax.get_legend_handles_labels()
        in_legend = {_style(h) for h in handles}
        shown = [a for a in [*ax.lines, *ax.collections] if not _reference(a) and len(getattr(a, "get_xdata", list)())
                 + (0 if hasattr(a, "get_xdata") else 1)]
        assert shown, name
        for artist in shown:  # the thick mean line, each seed's star and abort mark: each like an entry
            assert _style(artist) in in_legend, (name, _style(artist), sorted(in_legend))
        colours = {}
        for handle, label in zip(handles, labels):
            if label.split(":")[0] in CONFIGURATIONS:
                colours.setdefault(label.split(":")[0], set()).add(_style(handle)[1])
        assert sorted(colours) == list(CONFIGURATIONS), (name, labels)
        assert all(len(c) == 1 for c in colours.values()), (name, "a configuration drawn in two colours", colours)
        assert len(set.union(*colours.values())) == len(CONFIGURATIONS), (name, "configurations share a colour", colours)


def _label_boxes(ax) -> list:
    fig = ax.figure
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    return [(text.get_text(), text.get_window_extent(renderer)) for text in ax.texts]


@pytest.mark.parametrize("world", ["six", "two runs"])
def test_the_pictures_step_labels_do_not_overlap(world, six, tmp_path, monkeypatch):
    """The last step of each seed (three seeds end close together) and every run's step 0 (all
    start at 0, 0) are written where they can be read: no two labels on one spot."""
    runs = six["runs"] if world == "six" else [(two := report_runs(tmp_path / "two"))["finished"], two["running"]]
    ax = _drawn(runs, tmp_path / "out", monkeypatch)["learning_vs_forgetting.png"]
    boxes = _label_boxes(ax)
    assert boxes and all("step" in text for text, _ in boxes)
    for i, (text, box) in enumerate(boxes):
        for other, second in boxes[i + 1:]:
            assert not box.overlaps(second), (text, other)
