"""`tatu sweep plan` and `start` refuse a plan whose members would fail before their first step
(a missing data dir, seed checkpoint, a seed tokenizer the data was not built with): 78, one
line naming the plan, the member and the variable, and nothing locked, so the corrected plan
can take the same name. A typo of a name gets the nearest one (REPLY_N -> REPLAY_N)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep_world import plan_text, stand_in_inputs

from tatu.exitcodes import BAD_CONFIG
from tatu.model.tokenizer import train_tokenizer
from tatu.ops.cli import main as tatu
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.load import load_plan


@pytest.fixture
def world(tmp_path, monkeypatch) -> Path:
    """A plan over REPLAY_N whose data and trunk the test takes away one at a time."""
    stand_in_inputs(tmp_path / "data", tmp_path / "runs" / "trunk" / "final")
    (tmp_path / "dose.toml").write_text(plan_text("dose", Path("data"), Path("runs/trunk/final")))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refused(argv: list[str], capsys) -> str:
    assert tatu(argv) == BAD_CONFIG
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "", captured
    return lines[0]


@pytest.mark.parametrize("command", [["sweep", "plan", "dose.toml"], ["sweep", "start", "dose.toml", "--foreground"]])
def test_a_missing_data_dir_is_refused_78_and_nothing_is_locked(world, capsys, command):
    (world / "data" / "manifest.json").unlink()
    (world / "data").rmdir()
    line = _refused(command, capsys)
    assert line.startswith("tatu sweep: dose.toml: member replay-n0-s1: TATU_DATA=") and str(world / "data") in line
    assert "no such data directory" in line and "tatu data build" in line
    assert not (world / "sweeps").exists()  # nothing locked: the name is still free
    # corrected, the same name starts: its plan is accepted and locked
    stand_in_inputs(world / "data")
    assert tatu(["sweep", "plan", "dose.toml"]) == 0


def test_a_missing_seed_checkpoint_is_refused_78(world, capsys):
    (world / "runs" / "trunk" / "final").rmdir()
    line = _refused(["sweep", "plan", "dose.toml"], capsys)
    assert f"TATU_SEED_CKPT={world / 'runs' / 'trunk' / 'final'}: no such checkpoint" in line


def test_a_data_dir_without_a_manifest_is_refused_78(world, capsys):
    (world / "data" / "manifest.json").unlink()
    line = _refused(["sweep", "plan", "dose.toml"], capsys)
    assert "manifest.json: no manifest" in line


def test_a_seed_whose_tokenizer_is_not_the_datas_is_refused_78(world, capsys):
    seed, other = train_tokenizer("char", ["abc"]), train_tokenizer("char", ["xyz"])
    (world / "runs" / "trunk" / "final" / "tokenizer.json").write_text(seed.to_json())
    manifest = json.loads((world / "data" / "manifest.json").read_text())
    (world / "data" / "manifest.json").write_text(json.dumps({**manifest, "tokenizer_hash": other.hash}))
    line = _refused(["sweep", "plan", "dose.toml"], capsys)
    assert f"its tokenizer ({seed.hash[:12]}) is not the one" in line and other.hash[:12] in line
    # the same tokenizer: accepted
    (world / "data" / "manifest.json").write_text(json.dumps({**manifest, "tokenizer_hash": seed.hash}))
    assert tatu(["sweep", "plan", "dose.toml"]) == 0


@pytest.mark.parametrize("edit, said", [
    (lambda t: t.replace("REPLAY_N = [", "REPLY_N = ["), "[axes] REPLY_N: is not a run variable (did you mean REPLAY_N?)"),
    (lambda t: t.replace("smallest REPLAY_N", "smallest REPLY_N"), "REPLY_N is not an axis of the plan (did you mean REPLAY_N?)"),
    (lambda t: t.replace("drift_hi <", "drfit_hi <"), "unknown metric 'drfit_hi' (did you mean drift_hi?)"),
    (lambda t: t.replace("< MIX_FORGET_LIMIT", "< MIX_FORGET_LIMT"), "MIX_FORGET_LIMT is neither a number nor a run variable (did you mean MIX_FORGET_LIMIT?)"),
    (lambda t: t.replace("SFT_GE = 2", "SFT_EG = 2"), "[base] SFT_EG: is not a run variable (did you mean SFT_GE?)"),
])
def test_a_typed_name_gets_the_nearest_known_one(world, edit, said):
    path = world / "dose.toml"
    path.write_text(edit(path.read_text()))
    with pytest.raises(SweepError) as refused:
        load_plan(path)
    assert refused.value.code == BAD_CONFIG and said in refused.value.message, refused.value.message


def test_replace_gives_the_name_of_a_sweep_whose_members_trained_nothing_and_refuses_one_that_did(world, capsys):
    from tatu.sweep.plan.lock import lock_path, reconcile
    from tatu.sweep.run.replace import discard_unstarted

    sweep_dir = world / "sweeps" / "dose"
    reconcile(load_plan(world / "dose.toml"), sweep_dir)  # locked, as a start whose members then all failed
    changed = world / "dose.toml"
    changed.write_text(changed.read_text().replace("MIX_STEPS_LIMIT = 4", "MIX_STEPS_LIMIT = 6"))
    # the corrected plan under the same name: refused, pointing at --replace
    assert tatu(["sweep", "start", "dose.toml", "--foreground"]) == BAD_CONFIG
    assert "or --replace, where no member trained a step" in capsys.readouterr().err
    # one member trained a step: --replace refuses too, naming it, and the lock stays
    member_dir = sweep_dir / "runs" / "dose.replay-n0-s1"
    member_dir.mkdir(parents=True)
    (member_dir / "events.jsonl").write_text(json.dumps({"event": "step", "step": 1}) + "\n")
    line = _refused(["sweep", "start", "dose.toml", "--foreground", "--replace"], capsys)
    assert "--replace: sweep dose has members that trained (replay-n0-s1)" in line and lock_path(sweep_dir).exists()
    # none trained: what it discards is said, and the name is free for the new plan
    (member_dir / "events.jsonl").write_text(json.dumps({"event": "eval", "step": 0}) + "\n")
    said = discard_unstarted(sweep_dir)
    assert said.startswith("--replace: discarded the lock of sweep dose") and "4 members, none of which trained" in said
    assert not sweep_dir.exists()
    assert reconcile(load_plan(changed), sweep_dir)[1] == "locked"
