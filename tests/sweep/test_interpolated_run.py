"""Interpolated members in a sweep, end to end in the foreground: 2 configurations x 2 seeds on
the tiny world, with `[interpolate] config = "full-replay2", alphas = [0.5, 0.25]`. The coordinator
writes each seed's interpolated checkpoints once their parent has finished; each checkpoint equals a
naive float64 (1 - a) seed + a end of the two parents written here, a read from its key's label
(0.25 tells the parents and a from 1 - a apart; 0.5 cannot); the report compares each as a
configuration of its own (its statistics and its paired difference with the baseline recomputed
by hand from the re-scored checkpoints); the rule judges it only on what it has (no
every_eval_drift, no common step: said, never a silent pass); an aborted parent's state/ is
interpolated as its end."""
from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from run_records import rejudged
from sweep_world import plan_world, run_through

from tatu.exitcodes import BAD_DATA
from tatu.sweep.judge.analysis import analyze
from tatu.sweep.judge.verdict import decide
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.interpolated import interpolated_members
from tatu.sweep.judge.interpolated import interpolated_result
from tatu.sweep.plan.lock import LockedPlan, read_lock
from tatu.sweep.judge.scores import score_checkpoint
from tatu.sweep.report.tables import closing_text, verdict_lines

pytestmark = pytest.mark.slow

CONFIGS = "full-replay2 = { REPLAY_N = 2 }\nfull = {}\n"
RULE = "first config such that drift < 50% and sftHeld_change < 0"
KEY = "full-replay2-a0.5"
KEY_QUARTER = "full-replay2-a0.25"
ALPHAS = {KEY: 0.5, KEY_QUARTER: 0.25}  # each key's alpha, as its label says (the plan's order)


def alpha_of(key: str) -> float:
    """The alpha a configuration's key is labelled with (full-replay2-a0.25 -> 0.25), read from the text."""
    prefix = "full-replay2-a"
    assert key.startswith(prefix), key
    return float(key[len(prefix):])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_trunk):
    root, plan = plan_world(tmp_path_factory, tiny_trunk, "wise", seeds=(1, 2), rule=RULE, configs=CONFIGS,
                            baseline='baseline = { config = "full" }')
    plan.write_text(plan.read_text() + '\n[interpolate]\nconfig = "full-replay2"\nalphas = [0.5, 0.25]\n')
    out = run_through(plan, root / "sweeps", "4/4 done")
    for key, seed in ((k, s) for k in ALPHAS for s in (1, 2)):  # written by the coordinator's pass, before the sweep finished
        assert f"{key}-s{seed}: interpolated (alpha {alpha_of(key):g}) from full-replay2-s{seed}'s end" in out
        assert out.index(f"{key}-s{seed}: interpolated") < out.index("sweep finished")
    return root / "sweeps" / "wise"


def _weights(ckpt: Path) -> dict[str, np.ndarray]:
    return load_file(str(ckpt / "model.safetensors"))


def _sha(ckpt: Path) -> str:
    return json.loads((ckpt / "manifest.json").read_text())["files"]["model.safetensors"]


def test_the_checkpoint_is_a_naive_float64_interpolation_of_the_two_parents(sweep):
    from tatu.model.hf import load_checkpoint_or_gpt2

    lock = read_lock(sweep)
    found = interpolated_members(lock.plan.interpolate, lock.members_of("compare"))
    assert [m.name for m in found] == [f"{k}-s{s}" for k in ALPHAS for s in (1, 2)]
    for m in found:
        alpha = alpha_of(m.config_key)  # the label's, not the member's own alpha field
        seed_ckpt, end = Path(m.env["TATU_SEED_CKPT"]), m.parent.run_dir / "final"
        ckpt = sweep / "interpolated" / m.name
        seed, ft, mixed = _weights(seed_ckpt), _weights(end), _weights(ckpt)
        assert mixed.keys() == seed.keys() and "lm_head.weight" not in mixed  # the tied head is not a tensor of its own
        moved = 0
        for name, tensor in mixed.items():
            s64, f64 = seed[name].astype(np.float64), ft[name].astype(np.float64)
            naive = ((1 - alpha) * s64 + alpha * f64).astype(seed[name].dtype)
            assert tensor.dtype == seed[name].dtype and np.array_equal(tensor, naive), name
            if alpha != 0.5:  # the parents swapped (a seed + (1 - a) end) would be another tensor
                swapped = (alpha * s64 + (1 - alpha) * f64).astype(seed[name].dtype)
                moved += not np.array_equal(swapped, naive)
            else:
                moved += not np.array_equal(seed[name], ft[name])
        assert moved > 0  # the parents differ, so the check compares something
        meta = json.loads((ckpt / "meta.json").read_text())["interpolation"]
        assert meta["alpha"] == alpha and meta["parent_member"] == m.parent.name
        assert (meta["seed"]["sha256"], meta["finetuned"]["sha256"]) == (_sha(seed_ckpt), _sha(end))
        model = load_checkpoint_or_gpt2(ckpt).build_model("cpu")  # loads verified, and ties the head again
        assert model.lm_head.weight is model.transformer.wte.weight


def _log_ratio(start: dict, end: dict) -> float:
    assert start["line_index"] == end["line_index"]
    return sum(end["nll_sum"]) / sum(end["line_tokens"]) - sum(start["nll_sum"]) / sum(start["line_tokens"])


def test_the_report_compares_it_like_every_configuration(sweep):
    data = analyze(sweep)
    configs = {c.key: c for c in data.compare.configs}
    assert list(configs) == ["full-replay2", "full", KEY, KEY_QUARTER]
    for key in ALPHAS:
        wise = configs[key]
        assert [r.state for r in wise.results] == ["done", "done"] and not wise.is_baseline
        assert wise.end_steps == configs["full-replay2"].end_steps  # its parent's end step
        assert wise.stats_common is None and "every_eval_drift" not in wise.metrics
    per_seed = {}
    env = {(m.config_key, m.seed): m.env for m in read_lock(sweep).members_of("compare")}
    folders = [(key, "full-replay2", lambda s, key=key: sweep / "interpolated" / f"{key}-s{s}") for key in ALPHAS]
    for key, parent, folder in (*folders, ("full", "full", lambda s: sweep / "runs" / f"wise.full-s{s}" / "final")):
        for s in (1, 2):  # scored on its parent's lines (cache hits: what the report used)
            base = score_checkpoint(Path(env[parent, s]["TATU_SEED_CKPT"]), env[parent, s], sweep / "scores")
            end = score_checkpoint(folder(s), env[parent, s], sweep / "scores")
            for set_name in ("enRuler", "sftHeld"):
                per_seed[key, set_name, s] = _log_ratio(base[set_name], end[set_name])
    for key, metric, set_name in ((k, m, n) for k in ALPHAS for m, n in (("drift", "enRuler"), ("sftHeld", "sftHeld"))):
        wise = configs[key]
        mean = (per_seed[key, set_name, 1] + per_seed[key, set_name, 2]) / 2
        assert wise.stats[metric].log_mean == pytest.approx(mean, abs=1e-12), key
        assert wise.stats[metric].change.value == pytest.approx(math.expm1(mean), abs=1e-12), key
        diffs = [per_seed[key, set_name, s] - per_seed["full", set_name, s] for s in (1, 2)]
        assert wise.paired[metric].change.value == pytest.approx(sum(diffs) / 2, abs=1e-12), key
        assert wise.paired_common["drift"] is None  # no lines at the common step: n/a, not a number
    assert per_seed[KEY, "enRuler", 1] != per_seed[KEY_QUARTER, "enRuler", 1]  # two alphas, two scores
    text = closing_text(data)
    for key in ALPHAS:
        rows = [line for line in text.splitlines() if line.startswith(key + " ")]
        assert len(rows) >= 3  # the configurations legend, the comparison table, the paired table
        a = alpha_of(key)
        assert any(f"none: interpolated, (1-{a:g}) seed + {a:g} full-replay2's end" in line for line in rows), key
    from tatu.sweep.report.plots import drift_axes, tradeoff_axes

    _, ax = tradeoff_axes(data)  # one point per member, its own among them
    assert set(ALPHAS) <= set(ax.get_legend_handles_labels()[1])
    _, ax = drift_axes(data)  # a `first config` rule: every configuration on its own tick
    assert [t.get_text() for t in ax.get_xticklabels()] == ["full-replay2", "full", KEY, KEY_QUARTER]


def _judged(sweep_dir: Path, lock: LockedPlan, rule: str) -> tuple[dict, dict, list[str]]:
    """(the verdict, the interpolated configuration's check, the verdict's lines) under another rule."""
    from tatu.sweep.judge.analysis import add_paired, stage_table

    lock = dataclasses.replace(lock, plan=rejudged(lock.plan, rule))
    configs = add_paired(lock.plan.baseline, stage_table(lock, lock.members_of("compare"), sweep_dir, "compare"))
    verdict = decide(lock.plan, configs)
    return verdict, next(c for c in verdict.checks if c.config == KEY), verdict_lines(verdict, True)


def test_the_rule_judges_it_on_what_it_has_and_says_what_it_lacks(sweep):
    lock = read_lock(sweep)
    wise = {c.key: c for c in analyze(sweep).compare.configs}[KEY]
    # judged last, after the named configurations, on its own end metrics
    verdict, check, _ = _judged(sweep, lock, "first config such that drift_hi < -100%")
    assert [c.config for c in verdict.checks] == ["full-replay2", "full", KEY, KEY_QUARTER]
    assert check.failed[0].measured == wise.metrics["drift_hi"] and verdict.chosen is None
    verdict, check, _ = _judged(sweep, lock, "first config such that drift_hi < 1000%")
    assert verdict.chosen == "full-replay2" and not check.failed and not check.missing
    # a rule naming every_eval_drift: it has none, so it is not judged, and the verdict says why
    verdict, check, lines = _judged(sweep, lock, "first config such that every_eval_drift_hi < 1000% and drift_hi < 1000%")
    assert check.missing == ("every_eval_drift_hi",) and verdict.chosen == "full-replay2"
    assert (f"  config={KEY} is not judged: no value for every_eval_drift_hi (interpolated: no daemon run, "
            "so no evals during training)") in lines
    verdict, check, lines = _judged(sweep, lock, "first config such that every_eval_drift_hi < -100% and drift_hi < 1000%")
    assert verdict.chosen is None and check.missing == ("every_eval_drift_hi",)  # never a silent pass
    # at the common step it has no lines: every condition is missing
    _, check, _ = _judged(sweep, lock, "first config such that drift_hi < 1000% at the common step")
    assert check.missing == ("drift_hi",)


def test_an_aborted_parent_is_interpolated_from_its_state(sweep, tmp_path):
    """The member as an abort leaves it (no final/, state/ at the abort's eval, verdict.json saying
    aborted), made from a finished one's files: its end is state/, and the interpolated member is aborted too."""
    lock = read_lock(sweep)
    member = next(m for m in interpolated_members(lock.plan.interpolate, lock.members_of("compare")) if m.name == f"{KEY_QUARTER}-s1")
    runs = tmp_path / "runs"
    shutil.copytree(member.parent.run_dir, runs / member.parent.run)
    shutil.rmtree(runs / member.parent.run / "final")
    verdict_path = runs / member.parent.run / "verdict.json"
    verdict = json.loads(verdict_path.read_text())
    verdict.setdefault("numbers", {})["aborted"] = "drift above the limit"
    verdict_path.write_text(json.dumps(verdict))
    aborted = dataclasses.replace(member, parent=dataclasses.replace(member.parent, env={**member.env, "TATU_OUT": str(runs)}))
    result = interpolated_result(aborted, tmp_path / "sweep")
    assert result.state == "aborted" and result.has("end") and result.evals is None
    ckpt = tmp_path / "sweep" / "interpolated" / member.name
    meta = json.loads((ckpt / "meta.json").read_text())["interpolation"]
    state = runs / member.parent.run / "state"
    assert meta["finetuned"] == {"path": str(state), "sha256": _sha(state)}
    seed, end, mixed = _weights(Path(member.env["TATU_SEED_CKPT"])), _weights(state), _weights(ckpt)
    a = alpha_of(KEY_QUARTER)
    for name, tensor in mixed.items():
        naive = ((1 - a) * seed[name].astype(np.float64) + a * end[name].astype(np.float64)).astype(tensor.dtype)
        assert np.array_equal(tensor, naive), name
    # written once: a second call keeps it; another end under the same name is refused (65)
    before = (ckpt / "manifest.json").read_bytes()
    assert interpolated_result(aborted, tmp_path / "sweep").lines["end"] == result.lines["end"]
    assert (ckpt / "manifest.json").read_bytes() == before
    other = next(m for m in lock.members_of("compare") if m.name == "full-replay2-s2").run_dir / "final"
    shutil.rmtree(state)
    shutil.copytree(other, state)  # another end under the parent's name: not the one interpolated
    with pytest.raises(SweepError) as err:
        interpolated_result(aborted, tmp_path / "sweep")
    assert err.value.code == BAD_DATA and str(err.value).startswith(f"{ckpt}: interpolated from another end than {state}")


def holm_by_hand(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment written out: the i-th smallest p times (m - i), running max, capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def test_it_is_paired_with_its_own_parent_too(sweep):
    """WiSE-FT's question, by seed and line: each interpolated end against its parent's end, per set
    (the ruler, sftHeld, every held-out set), each difference recomputed here from the re-scored
    checkpoint of the key the row names; Holm over the two alphas, per set, by hand."""
    data = analyze(sweep)
    rows = data.compare.vs_parent
    assert [(r.config, r.parent, r.alpha) for r in rows] == [(k, "full-replay2", alpha_of(k)) for k in ALPHAS]
    held_out = [name for name in {c.key: c for c in data.compare.configs}[KEY].stats
                if name not in ("drift", "sftHeld")]
    env = {m.seed: m.env for m in read_lock(sweep).members_of("compare") if m.config_key == "full-replay2"}
    by_row = {}
    for row in rows:
        assert list(row.paired) == ["drift", "sftHeld", *held_out]
        for metric in row.paired:
            set_name = {"drift": "enRuler"}.get(metric, metric)
            diffs = []
            for s in (1, 2):
                base = score_checkpoint(Path(env[s]["TATU_SEED_CKPT"]), env[s], sweep / "scores")[set_name]
                child = score_checkpoint(sweep / "interpolated" / f"{row.config}-s{s}", env[s], sweep / "scores")[set_name]
                parent = score_checkpoint(sweep / "runs" / f"wise.full-replay2-s{s}" / "final", env[s], sweep / "scores")[set_name]
                diffs.append(_log_ratio(base, child) - _log_ratio(base, parent))
            paired = row.paired[metric]
            diff = paired.change
            assert paired.n_seeds == 2 and diff.value == pytest.approx(sum(diffs) / 2, abs=1e-12), (row.config, metric)
            assert diff.lo <= diff.value <= diff.hi
            by_row[row.config, metric] = diffs
        assert by_row[row.config, "drift"][0] != 0.0  # the walk back changed the scores, so the check compares something
    assert by_row[KEY, "drift"] != by_row[KEY_QUARTER, "drift"]  # the two alphas differ, so the pairing is checked
    for metric in rows[0].paired:  # Holm over the alphas, per set
        found = [row.paired[metric] for row in rows]
        assert [p.p_holm for p in found] == pytest.approx(holm_by_hand([p.p_value for p in found]), abs=1e-15), metric
        assert [p.n_compared for p in found] == [2, 2]
    assert any(row.paired[m].p_holm != row.paired[m].p_value for row in rows for m in row.paired)  # Holm adjusted something
    text = closing_text(data)
    assert "interpolated vs its parent, paired by seed and line, each seed at its parent's end" in text
    assert all(row.steps and len(row.steps) == 1 for row in rows)  # each pair at its parent's one end step
    from tatu.sweep.report.write import write_report

    _, _, page = write_report(sweep, sweep / "report-vs-parent")
    for key in ALPHAS:
        assert 'id="vs-parent"' in page.read_text() and f"{key} vs full-replay2" in page.read_text()
        assert any(line.startswith(f"{key} vs full-replay2 ") for line in text.splitlines())
