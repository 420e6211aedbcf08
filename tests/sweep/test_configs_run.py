"""A sweep of two named configurations that differ in several variables (LoRA r=2 with no replay
vs every weight with replay and another learning rate), 2 seeds, through the foreground backend:
each member runs with its configuration's variables, says what trained, and the report compares
the two: per configuration over seeds and paired by seed and line against the baseline, its
numbers recomputed here with plain loops from the daemon's own per-line scores. TensorBoard's HParams
view gets one session per member, with its configuration and its last eval, read back here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep_world import assert_paired_p_agrees_with_ci, plan_world, run_through
from tb_reader import assert_curves_equal_events, expected_points, hparams_view, read_back, require_tensorboard

from tatu.daemon.logs import read_events
from tatu.sweep.plan.lock import read_lock

pytestmark = pytest.mark.slow

CONFIGS = ('lora-r2 = { TATU_TRAIN = "lora", TATU_LORA_RANK = 2, REPLAY_N = 0 }\n'
           "full-replay2 = { REPLAY_N = 2, TATU_LR = 1e-3 }\n")
RULE = "first config such that drift < 50% and sftHeld_change < 0"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, tiny_trunk):
    root, plan = plan_world(tmp_path_factory, tiny_trunk, "methods", seeds=(1, 2), rule=RULE, configs=CONFIGS,
                            baseline='baseline = { config = "full-replay2" }')
    out = run_through(plan, root / "sweeps", "4/4 done")
    # This plan leaves the thread count to the backend, and the start says what that means.
    assert "threads: not fixed by the plan, so each member takes its backend's count (torch's default)" in out
    return root / "sweeps" / "methods"


def _log_ratio(start: dict, end: dict) -> float:
    """log(ppl_end / ppl_start) by hand, after checking both scored the same lines."""
    assert start["line_index"] == end["line_index"]
    return sum(end["nll_sum"]) / sum(end["line_tokens"]) - sum(start["nll_sum"]) / sum(start["line_tokens"])


def test_each_member_ran_its_configurations_variables(sweep):
    for m in read_lock(sweep).members_of("compare"):
        meta = json.loads((Path(m.env["TATU_OUT"]) / m.run / "final" / "meta.json").read_text())
        config, trained = meta["config"], meta["trainable"]["line"]
        if m.config_key == "lora-r2":
            assert (config["TATU_TRAIN"], config["TATU_LORA_RANK"], config["REPLAY_N"], config["TATU_LR"]) == ("lora", 2, 0, 0.003)
            assert trained.startswith("lora r=2 alpha=4 on ")
        else:
            assert (config["TATU_TRAIN"], config["REPLAY_N"], config["TATU_LR"]) == ("all", 2, 0.001)
            assert trained.startswith("trainable ") and "(100.0%)" in trained


def test_the_report_compares_the_configurations_against_the_baseline(sweep, tmp_path):
    from tatu.sweep.judge.analysis import analyze
    from tatu.pages.markup import esc
    from tatu.sweep.report.page import write_page
    from tatu.sweep.report.tables import closing_text
    from tatu.sweep.judge.common_step import lines_at
    from tatu.sweep.judge.scores import score_checkpoint

    data = analyze(sweep)
    configs = {c.key: c for c in data.compare.configs}
    assert list(configs) == ["lora-r2", "full-replay2"]
    assert configs["full-replay2"].is_baseline and not configs["lora-r2"].is_baseline
    per_seed = {}
    for m in read_lock(sweep).members_of("compare"):
        # what the report uses: the daemon's own per-line scores at step 0 and at its last eval (step 4)
        base, end = lines_at(m.run_dir, 0), lines_at(m.run_dir, 4)
        for set_name in ("enRuler", "sftHeld"):
            per_seed[m.config_key, set_name, m.seed] = _log_ratio(base[set_name], end[set_name])
        # final/ re-scored on the CPU: every weight trained, the daemon's very numbers; LoRA's adapters
        # merged into final/ round their sum once more, the last bits of a line's NLL
        rescored = score_checkpoint(m.run_dir / "final", m.env, tmp_path / "scores")
        for set_name in ("enRuler", "sftHeld"):
            if m.config_key == "full-replay2":
                assert rescored[set_name]["nll_sum"] == end[set_name]["nll_sum"]
            else:
                assert rescored[set_name]["nll_sum"] == pytest.approx(end[set_name]["nll_sum"], rel=1e-6)
                assert rescored[set_name]["nll_sum"] != end[set_name]["nll_sum"]
    for metric, set_name in (("drift", "enRuler"), ("sftHeld", "sftHeld")):
        for key, config in configs.items():
            mean = (per_seed[key, set_name, 1] + per_seed[key, set_name, 2]) / 2
            assert config.stats[metric].log_mean == pytest.approx(mean, abs=1e-12)
        diffs = [per_seed["lora-r2", set_name, s] - per_seed["full-replay2", set_name, s] for s in (1, 2)]
        paired = configs["lora-r2"].paired[metric]
        assert_paired_p_agrees_with_ci(paired, diffs)
    text = closing_text(data)
    legend = text.split("what trains in each", 1)[1].split("\n\n", 1)[0].splitlines()
    assert legend[2].split()[:4] == ["lora-r2", "REPLAY_N=0", "TATU_LORA_RANK=2", "TATU_TRAIN=lora"] and "lora r=2 alpha=4" in legend[2]
    assert legend[3].split()[:3] == ["full-replay2", "REPLAY_N=2", "TATU_LR=0.001"] and "(100.0%)" in legend[3]
    paired_rows = text.split("paired by seed and line vs the baseline", 1)[1].split("\n\n", 1)[0].splitlines()
    assert paired_rows[2].startswith("lora-r2 ") and len(paired_rows) == 3
    assert any(line.startswith("full-replay2 *") for line in text.splitlines())
    # the locked rule judged the configurations in the plan's order
    assert [c.config for c in data.verdict.checks] == ["lora-r2", "full-replay2"]
    # the verdict is the first configuration, in the plan's order, that failed no condition
    passing = [c.config for c in data.verdict.checks if not c.failed and not c.missing]
    expected = f"config={passing[0]}: the first config" if passing else "no config satisfies"
    assert data.verdict.line.startswith(expected) and data.verdict.chosen == (passing[0] if passing else None)
    for check in data.verdict.checks:  # each failed condition is one its configuration's measured value breaks
        for fail in check.failed:
            measured = configs[check.config].metrics[fail.condition.split()[0]]
            assert fail.measured == measured and not measured < fail.threshold
    # the HTML page has the same configurations table and verdict as the text
    page = write_page(data, text, [], tmp_path).read_text()
    assert "TATU_LORA_RANK=2" in page and "lora r=2 alpha=4" in page and esc(data.verdict.line) in page


# What TensorBoard's HParams view must show of each configuration (the lock's effective values,
# typed as sweep/run/hparams.py promises: numbers where every member's value is one, else strings).
HPARAMS = {"lora-r2": {"config": "lora-r2", "TATU_TRAIN": "lora", "TATU_LORA_RANK": "2", "REPLAY_N": 0.0, "TATU_LR": 0.003},
           "full-replay2": {"config": "full-replay2", "TATU_TRAIN": "all", "TATU_LORA_RANK": "unset", "REPLAY_N": 2.0,
                            "TATU_LR": 0.001}}


def test_each_member_has_one_hparams_session_with_its_configuration_and_its_last_eval(sweep):
    """Written by the coordinator as each member finished (TATU_TENSORBOARD is auto in the plan)."""
    require_tensorboard()
    lock = read_lock(sweep)
    assert sorted(p.name for p in (sweep / "tb").iterdir()) == sorted(m.name for m in lock.members_of())
    for m in lock.members_of():
        back = read_back(sweep / "tb" / m.name)
        verdict = json.loads((m.run_dir / "verdict.json").read_text())["verdict"]
        assert back.hparams == {**HPARAMS[m.config_key], "seed": float(m.seed), "stage": "compare", "verdict": verdict}
        assert back.session_ended
        events = read_events(m.run_dir / "events.jsonl")
        last = max(e["step"] for e in events if e["event"] == "eval")
        final = {(tag, step): v for (tag, step), v in expected_points(events).items()
                 if step == last and not tag.startswith("train/")}
        assert {"drift/hi", "change/sftHeld/value"} <= {tag for tag, _ in final}
        assert {(tag, step): v for tag, points in back.scalars.items() for step, v in points} == final
        assert_curves_equal_events(read_back(m.run_dir / "tb"), events)  # and its curves, beside it


def test_tatu_tensorboard_writes_the_same_sessions_and_curves_again_from_the_files(sweep, tmp_path, capsys):
    require_tensorboard()
    from tatu.ops import cli

    assert cli.main(["tensorboard", str(sweep), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"tensorboard --logdir {tmp_path}"
    for m in read_lock(sweep).members_of():
        assert read_back(tmp_path / sweep.name / "tb" / m.name) == read_back(sweep / "tb" / m.name)
        assert read_back(tmp_path / sweep.name / "runs" / m.run) == read_back(m.run_dir / "tb")
    before = sorted(p for p in sweep.rglob("*") if p.is_file())
    assert cli.main(["tensorboard", str(sweep)]) == 0  # onto what the coordinator and the daemons wrote
    out = capsys.readouterr().out
    assert out.count("nothing new") == 4 and "0 HParams session(s) written" in out
    assert sorted(p for p in sweep.rglob("*") if p.is_file()) == before


def test_tensorboards_own_hparams_view_lists_every_member_with_its_configuration_and_numbers(sweep):
    """`tensorboard --logdir SWEEP_DIR`'s HParams dashboard, from TensorBoard's own backend (no server)."""
    groups = hparams_view(sweep)
    lock = read_lock(sweep)
    assert sorted(groups) == sorted(f"tb/{m.name}" for m in lock.members_of())  # the curves' runs are no sessions
    for m in lock.members_of():
        session = read_back(sweep / "tb" / m.name)
        assert groups[f"tb/{m.name}"].hparams == session.hparams
        assert groups[f"tb/{m.name}"].metrics == {tag: points[-1][1] for tag, points in session.scalars.items()}
