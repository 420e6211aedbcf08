"""`tatu interpolate`'s refusals: each one line on stderr with its documented exit code, before
anything is scored, and nothing written (docs/interpolation.md#refusals)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tatu import exitcodes
from tatu.model.checkpoint import load_checkpoint, save_checkpoint
from tatu.model.gpt import GPT, GPTConfig
from tatu.model.tokenizer import CharTokenizer
from tatu.ops.cli import main as tatu

BOOT = ["--seed", "7", "--resamples", "200"]


def _refused(interp_world, tmp_path, capsys, *args: str, seed: Path | None = None, ft: Path | None = None) -> tuple[int, str]:
    """rc and the one stderr line of a refused interpolation, having checked nothing was scored or written."""
    report, out = tmp_path / "report", tmp_path / "out"
    extra = [] if "--out" in args else ["--out", str(out)] if any(a == "--pick" for a in args) else []
    rc = tatu(["interpolate", str(seed or interp_world["seed"]), str(ft or interp_world["ft"]), "--data", str(interp_world["data"]),
               "--report", str(report), *extra, *args, *BOOT])
    captured = capsys.readouterr()
    assert "scored" not in captured.out, "refused only after scoring"
    assert not report.exists() and not out.exists(), "a refusal wrote something"
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return rc, lines[0]


@pytest.mark.parametrize("spec, says", [
    ("0:2:0.5", "1.5, 2.0 outside [0, 1]"), ("-0.1,0.5", "-0.1 outside [0, 1]"), ("1:0:0.1", "STOP >= START"),
    ("0:1:0", "STEP > 0"), ("0:1:0.3", "does not reach STOP"), ("0:1", "expected START:STOP:STEP"),
    ("a,b", "'a' is not a number"), ("0,nan", "'nan' is not a number"), ("0:1:0.00001", "more than 1001"),
])
def test_a_bad_alphas_spec_is_78_naming_it(interp_world, tmp_path, capsys, spec, says):
    rc, line = _refused(interp_world, tmp_path, capsys, f"--alphas={spec}")  # `=`: argparse reads "-0.1,..." as a flag
    assert rc == exitcodes.BAD_CONFIG and line.startswith(f"tatu interpolate: --alphas {spec!r}") and says in line, line


@pytest.mark.parametrize("rule, says", [
    ("first config such that drift < 0.1", "it chooses an alpha"),
    ("largest REPLAY_N such that drift < 0.1", "it chooses an alpha"),
    ("largest alpha such that aborted < 1", "aborted is a training run's"),
    ("largest alpha such that ptNews_change_hi < 0.1", "ptNews is not a held-out set of the data dir"),
    ("largest alpha such that drift_hi < 0.1 at the common step", "no common step"),
    ("largest alpha such that bogus < 0.1", "unknown metric 'bogus'"),
    ("largest alpha such that drift < TATU_ANYTHING", "neither a number nor a run variable"),
    ("largest alpha such that drift", "condition 'drift' is not 'METRIC < VALUE'"),
    ("the best alpha", "is not 'smallest|largest AXIS such that"),
])
def test_a_bad_pick_rule_is_78_naming_it(interp_world, tmp_path, capsys, rule, says):
    rc, line = _refused(interp_world, tmp_path, capsys, "--pick", rule)
    assert rc == exitcodes.BAD_CONFIG and "--pick" in line and says in line, line


def test_a_rule_variable_the_fine_tune_does_not_record_is_78(interp_world, tmp_path, capsys):
    bare = tmp_path / "bare"  # the fine-tune's weights without its run config
    ckpt = load_checkpoint(interp_world["ft"])
    save_checkpoint(bare, model_state=ckpt.model_state, model_config=ckpt.model_config, tokenizer=ckpt.tokenizer, meta={})
    rc, line = _refused(interp_world, tmp_path, capsys, "--pick", "largest alpha such that drift < MIX_FORGET_LIMIT", ft=bare)
    assert rc == exitcodes.BAD_CONFIG and "MIX_FORGET_LIMIT is not recorded in" in line and str(bare) in line


def _other(interp_world, tmp_path: Path, **config) -> Path:
    """A checkpoint like the seed but for `config` (or, given tokenizer=..., another tokenizer)."""
    seed = load_checkpoint(interp_world["seed"])
    tok = config.pop("tokenizer", seed.tokenizer)
    cfg = GPTConfig(**{**seed.model_config.to_dict(), "vocab_size": tok.vocab_size, **config})
    path = tmp_path / "other"
    save_checkpoint(path, model=GPT(cfg), model_config=cfg, tokenizer=tok)
    return path


def test_parents_of_another_architecture_are_65_naming_both_files_and_the_field(interp_world, tmp_path, capsys):
    other = _other(interp_world, tmp_path, n_embd=16)
    rc, line = _refused(interp_world, tmp_path, capsys, ft=other)
    assert rc == exitcodes.BAD_DATA and "different architectures (n_embd 32 vs 16)" in line
    assert str(interp_world["seed"]) in line and str(other) in line


def test_parents_with_another_tokenizer_are_78(interp_world, tmp_path, capsys):
    tok = CharTokenizer.train(["uma outra lista de letras"])
    rc, line = _refused(interp_world, tmp_path, capsys, seed=_other(interp_world, tmp_path, tokenizer=tok))
    assert rc == exitcodes.BAD_CONFIG and "different tokenizers" in line


def test_a_missing_or_damaged_parent_is_65_naming_it(interp_world, tmp_path, capsys):
    rc, line = _refused(interp_world, tmp_path, capsys, ft=tmp_path / "nowhere")
    assert rc == exitcodes.BAD_DATA and str(tmp_path / "nowhere") in line
    damaged = tmp_path / "damaged"
    shutil.copytree(interp_world["ft"], damaged)
    with open(damaged / "model.safetensors", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x01\x02\x03")
    rc, line = _refused(interp_world, tmp_path, capsys, ft=damaged)
    assert rc == exitcodes.BAD_DATA and "sha256 mismatch" in line and str(damaged) in line


def test_an_existing_out_or_out_without_pick_is_refused(interp_world, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    rc, line = _refused(interp_world, tmp_path, capsys, "--pick", "largest alpha such that drift_hi < 0.1", "--out", str(taken))
    assert rc == exitcodes.BAD_CONFIG and f"{taken}: already exists" in line
    rc, line = _refused(interp_world, tmp_path, capsys, "--out", str(tmp_path / "out"))
    assert rc == exitcodes.USAGE and "--out writes the alpha --pick chooses" in line


def test_no_alpha_satisfying_the_rule_says_so_and_writes_nothing(interp_world, tmp_path, capsys):
    report, out = tmp_path / "report", tmp_path / "out"
    rc = tatu(["interpolate", str(interp_world["seed"]), str(interp_world["ft"]), "--data", str(interp_world["data"]), "--alphas", "0,1",
               "--pick", "largest alpha such that drift_hi < -0.5", "--out", str(out), "--report", str(report), *BOOT])
    printed = capsys.readouterr().out
    assert rc == exitcodes.NO_CHOICE == 1
    assert "no alpha satisfies the rule (largest alpha such that drift_hi < -0.5)" in printed
    assert "alpha 1: drift_hi < -0.5 (measured" in printed and "nothing written" in printed
    assert not report.exists() and not out.exists()
    assert not list(tmp_path.glob(".*"))  # no temporary sibling left either



def test_a_sweep_plan_cannot_choose_alpha():
    """The rule grammar reads `alpha` for `tatu interpolate --pick` only: a plan has no such axis."""
    from tatu.sweep.errors import SweepError
    from tatu.sweep.plan.rule import parse_rule

    with pytest.raises(SweepError, match=r"plan.toml: \[decision\] rule: alpha is not an axis of the plan \(axes: REPLAY_N\)"):
        parse_rule("largest alpha such that drift_hi < 0.1", {"REPLAY_N": [0, 2]}, Path("plan.toml"))
