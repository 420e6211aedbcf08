"""Runs with the retention terms on (daemon/retention/): off means off, the penalty is 0 at the seed,
the Fisher is written once and never recomputed on a restart, every place says what ran, and a
restart with other settings, another seed or another Fisher file is refused (78, 65)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tiny_world import base_env, clean_environ

from tatu.daemon.main import main as daemon_main
from tatu.daemon.retention import fisher as fisher_mod
from tatu.daemon.retention.anchor import Anchor
from tatu.daemon.retention.distill import Distiller

EWC = {"TATU_ANCHOR": "ewc", "TATU_ANCHOR_WEIGHT": "50", "TATU_EWC_BATCHES": "3"}
DISTILL = {"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "0.5"}


def sft_env(world, out, **extra):
    settings = dict(TATU_RUN="run", TATU_SEED_CKPT=world["trunk"], SFT_GE=2, REPLAY_N=1, MIX_STEPS_LIMIT=2,
                    EVAL_EVERY=2, TATU_LR="1e-2", TATU_CKPT_EVERY=2, TATU_GEN_PROMPTS=0,
                    MIX_FORGET_LIMIT="1")  # these runs test the terms, not the verdict: no abort
    settings.update(extra)
    return base_env(world["data"], out, **settings)


def steps(run_dir) -> list[dict]:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [e for e in events if e["event"] == "step"]


def refuse(*_args, **_kwargs):
    raise AssertionError("called")


def test_off_means_off_no_seed_term_touches_the_step(tiny_trunk, tmp_path, monkeypatch):
    for target, name in ((Anchor, "add_gradient"), (Distiller, "term"), (Distiller, "__init__")):
        monkeypatch.setattr(target, name, refuse)
    monkeypatch.setattr(fisher_mod, "estimate_fisher", refuse)
    assert daemon_main(sft_env(tiny_trunk, tmp_path)) == 0
    meta = json.loads((tmp_path / "run" / "final" / "meta.json").read_text())
    assert "seed_terms" not in meta and "seed_terms" not in json.loads((tmp_path / "run" / "state" / "resume.json").read_text())
    assert not (tmp_path / "run" / fisher_mod.FISHER_FILE).exists()


def test_l2sp_first_step_loss_is_the_plain_runs_and_the_weights_stay_nearer(tiny_trunk, tmp_path):
    assert daemon_main(sft_env(tiny_trunk, tmp_path / "plain")) == 0
    assert daemon_main(sft_env(tiny_trunk, tmp_path / "l2sp", TATU_ANCHOR="l2sp", TATU_ANCHOR_WEIGHT="1000")) == 0
    plain, anchored = steps(tmp_path / "plain" / "run"), steps(tmp_path / "l2sp" / "run")
    assert anchored[0]["loss"] == plain[0]["loss"]  # the penalty is 0 at the seed
    seed = load_file(tiny_trunk["trunk"] / "model.safetensors")

    def distance(root):
        final = load_file(root / "run" / "final" / "model.safetensors")
        return sum(float((final[k].double() - seed[k].double()).square().sum()) for k in seed)
    assert distance(tmp_path / "l2sp") < distance(tmp_path / "plain")
    meta = json.loads((tmp_path / "l2sp" / "run" / "final" / "meta.json").read_text())
    assert meta["seed_terms"]["line"].startswith("anchor l2sp lambda=1000 (seed sha256 ")


def test_ewc_writes_its_fisher_once_and_says_so_everywhere(tiny_trunk, tmp_path, monkeypatch):
    from tatu.ops.report import page as report

    from tatu.daemon.supervisor import Supervisor

    shown = []  # what `tatu status` prints after "trains" (the supervisor's status reply)
    original = Supervisor.describe_training
    monkeypatch.setattr(Supervisor, "describe_training", lambda self, line: (shown.append(line), original(self, line)))
    assert daemon_main(sft_env(tiny_trunk, tmp_path, **EWC)) == 0
    run = tmp_path / "run"
    saved = json.loads((run / "state" / "resume.json").read_text())["seed_terms"]
    sha = saved["anchor"]["fisher"]["sha256"]
    assert fisher_mod.read_fisher(run, sha).fisher  # the file is the one the state names
    line = f"anchor ewc lambda=50 (Fisher: 3 replay micro-batches, true labels, sha256 {sha[:4]}..)"
    log = (run / "run.log").read_text()
    assert line in log and "Fisher mean " in log
    assert shown and shown[-1].endswith(f"; {line}")
    for ckpt in ("final", "best"):
        assert json.loads((run / ckpt / "meta.json").read_text())["seed_terms"]["line"] == line
    index = report.build_report([run], tmp_path / "report")
    assert line in index.read_text(encoding="utf-8")
    # a restart continues with the same file, never recomputed
    monkeypatch.setattr(fisher_mod, "estimate_fisher", refuse)
    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=4, **EWC)) == 0
    restarted = (run / "run.log").read_text().rsplit("resumed from step 2", 1)[-1]
    assert line in restarted and "Fisher mean " in restarted
    # a changed Fisher file is another run: 65, before a step
    fisher_mod.write_fisher(run, {k: v * 2 for k, v in fisher_mod.read_fisher(run, sha).fisher.items()})
    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=6, **EWC)) == 65


@pytest.mark.parametrize("change", [{"TATU_ANCHOR": "l2sp", "TATU_EWC_BATCHES": ""}, {"TATU_ANCHOR_WEIGHT": "5"},
                                    {"TATU_EWC_FISHER": "empirical"}, {"TATU_EWC_BATCHES": "4"},
                                    {"TATU_ANCHOR": "none", "TATU_ANCHOR_WEIGHT": "", "TATU_EWC_BATCHES": ""}])
def test_a_restart_with_another_anchor_is_another_run_78(tiny_trunk, tmp_path, change, capsys):
    assert daemon_main(sft_env(tiny_trunk, tmp_path, **EWC)) == 0
    capsys.readouterr()
    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=4, **{**EWC, **change})) == 78
    err = capsys.readouterr()
    assert "start a new TATU_RUN" in err.out + err.err


def test_distill_says_what_it_costs_and_a_restart_with_another_seed_is_65(tiny_trunk, tmp_path, capsys):
    seed = tmp_path / "seed"  # a seed of this test's own, replaced below
    shutil.copytree(tiny_trunk["trunk"], seed)
    env = {**sft_env(tiny_trunk, tmp_path, **DISTILL), "TATU_SEED_CKPT": str(seed)}
    assert daemon_main(env) == 0
    log = (tmp_path / "run" / "run.log").read_text()
    assert "distill on replay alpha=0.5 T=2" in log and "MiB in fp32" in log and "x 1 distilled micro-batches per step" in log
    first, second = steps(tmp_path / "run")
    assert first["distill"] == 0.0 and second["distill"] > 0  # the model is the seed at step 1, then moves away
    # the file at TATU_SEED_CKPT is no longer the seed the run started from: its teacher is gone
    assert daemon_main(sft_env(tiny_trunk, tmp_path / "o", TATU_RUN="o")) == 0
    shutil.rmtree(seed)
    shutil.copytree(tmp_path / "o" / "o" / "final", seed)
    capsys.readouterr()
    assert daemon_main({**env, "MIX_STEPS_LIMIT": "4"}) == 65
    said = capsys.readouterr()
    assert "are not the seed this run started from" in said.out + said.err


@pytest.mark.parametrize("settings,named", [({"TATU_ANCHOR": "l2sp"}, "TATU_ANCHOR_WEIGHT"),
                                            ({"TATU_DISTILL": "1", "TATU_DISTILL_WEIGHT": "1", "TATU_DISTILL_T": "0"},
                                             "TATU_DISTILL_T")])
def test_a_bad_value_exits_78_in_one_line_before_anything_is_written(tiny_trunk, tmp_path, settings, named):
    proc = subprocess.run([sys.executable, "-m", "tatu.daemon"], capture_output=True, text=True, timeout=120,
                          env={**clean_environ(), **sft_env(tiny_trunk, tmp_path, **settings)})
    assert proc.returncode == 78, proc.stderr[-800:]
    assert named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


SWAMP_WARNING = "the run is learning the penalty, not the data; lower TATU_ANCHOR_WEIGHT"


@pytest.mark.parametrize("anchor", ["l2sp", "ewc"])
def test_the_step_event_holds_the_data_and_penalty_gradient_norms_as_a_naive_recomputation(tiny_trunk, tmp_path,
                                                                                           monkeypatch, anchor):
    """Beside each other: the micro-batches' gradient norm before the penalty's is added, and the norm of
    what the penalty adds (the difference), each recomputed here in float64 from the .grad tensors."""
    naive = []
    original = Anchor.add_gradient

    def watched(self):
        before = {w.name: w.param.grad.double().clone() for w in self.weights}
        value = original(self)
        data = sum(float(g.square().sum()) for g in before.values()) ** 0.5
        added = sum(float((w.param.grad.double() - before[w.name]).square().sum()) for w in self.weights) ** 0.5
        naive.append((data, added))
        return value
    monkeypatch.setattr(Anchor, "add_gradient", watched)
    settings = {**EWC} if anchor == "ewc" else {"TATU_ANCHOR": "l2sp", "TATU_ANCHOR_WEIGHT": "50"}
    assert daemon_main(sft_env(tiny_trunk, tmp_path, MIX_STEPS_LIMIT=3, **settings)) == 0
    got = [(e["grad_norm_data"], e["grad_norm_penalty"]) for e in steps(tmp_path / "run")]
    assert len(got) == len(naive) == 3
    assert got[0][1] == 0.0 and all(p > 0 for _, p in got[1:])  # 0 at the seed, then the weights have moved
    for (data, added), (naive_data, naive_added) in zip(got, naive):
        assert data == pytest.approx(naive_data, rel=1e-5)
        assert added == pytest.approx(naive_added, rel=1e-4, abs=1e-9)


def test_a_penalty_that_swamps_the_data_is_said_once_and_a_normal_one_is_not(tiny_trunk, tmp_path, monkeypatch):
    from tatu.daemon.supervisor import Supervisor
    from tatu.ops.status import format_status

    supervisors = []
    original = Supervisor.warn
    monkeypatch.setattr(Supervisor, "warn", lambda self, line: (supervisors.append(self), original(self, line)))
    assert daemon_main(sft_env(tiny_trunk, tmp_path / "huge", MIX_STEPS_LIMIT=4,
                               TATU_ANCHOR="l2sp", TATU_ANCHOR_WEIGHT="1000")) == 0
    log = (tmp_path / "huge" / "run" / "run.log").read_text()
    (warning,) = [line for line in log.splitlines() if SWAMP_WARNING in line]
    big = [e for e in steps(tmp_path / "huge" / "run") if e["grad_norm_penalty"] > 10 * e["grad_norm_data"]]
    assert len(big) >= 2  # it swamps at more than one step, and is said at the first alone
    assert f"step {big[0]['step']}: TATU_ANCHOR=l2sp's gradient norm " in warning and "(now 1000)" in warning
    (supervisor,) = supervisors
    shown = format_status(dict(supervisor._snapshot.progress))  # what `tatu status` prints
    said = warning[warning.index("step "):]
    assert f"WARNING {said}" in shown.splitlines()
    assert daemon_main(sft_env(tiny_trunk, tmp_path / "normal", MIX_STEPS_LIMIT=4,
                               TATU_ANCHOR="l2sp", TATU_ANCHOR_WEIGHT="0.01")) == 0
    assert SWAMP_WARNING not in (tmp_path / "normal" / "run" / "run.log").read_text()
    assert len(supervisors) == 1
