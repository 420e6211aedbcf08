"""An interpolated member's checkpoint and result (what sweep/plan/interpolated.py defines): written
once its parent has a result, by the coordinator's pass or, failing that, by the report, both
through `write_checkpoint` (idempotent: an existing checkpoint of the same parents is kept)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tatu.daemon.run.paths import SweepDir
from tatu.daemon.run.view import read_run
from tatu.exitcodes import BAD_CONFIG, BAD_DATA
from tatu.model.checkpoint.files import CheckpointError, read_meta
from tatu.sweep.errors import SweepError
from tatu.sweep.plan.interpolated import InterpolatedMember
from tatu.sweep.judge.outcome import TERMINAL, outcome
from tatu.sweep.judge.records import MemberResult
from tatu.sweep.judge.scores import end_checkpoint, score_checkpoint

ENDS = ("done", "aborted")  # a parent with an end checkpoint: final/, or state/ at its abort


def _sha256(ckpt: Path) -> str:
    """The sha256 of a tatu checkpoint's weights, as its manifest holds it (verified on load)."""
    return json.loads((Path(ckpt) / "manifest.json").read_text(encoding="utf-8"))["files"]["model.safetensors"]


def _parent_end(member: InterpolatedMember) -> tuple[str, Path | None]:
    """(the parent's state, its end checkpoint when it has one)."""
    state = outcome(member.parent.run_dir).state
    return state, (end_checkpoint(member.parent.run_dir) if state in ENDS else None)


def write_checkpoint(sweep_dir: Path, member: InterpolatedMember) -> Path | None:
    """sweeps/<name>/interpolated/<key>-s<seed>/ (None while the parent has no end). Written once:
    a checkpoint already there is kept if it names the parent's end by sha256, else refused (65)."""
    from tatu.model.checkpoint import save_checkpoint
    from tatu.model.hf import load_checkpoint_or_gpt2
    from tatu.model.interpolation import ParentMismatch, check_parents, interpolate_state, interpolated_config, plain_weights

    _, end = _parent_end(member)
    if end is None:
        return None
    target = member.directory(sweep_dir)
    if (target / "manifest.json").is_file():
        try:
            recorded = (read_meta(target).get("interpolation") or {}).get("finetuned", {}).get("sha256")
        except CheckpointError as exc:
            raise SweepError(BAD_DATA, f"{exc}: remove {target} and report again") from None
        if recorded != _sha256(end):
            raise SweepError(BAD_DATA, f"{target}: interpolated from another end than {end} (sha256 {str(recorded)[:12]}.. "
                                       f"vs {_sha256(end)[:12]}..): remove it and report again")
        return target
    seed_path = Path(member.env["TATU_SEED_CKPT"])
    seed, finetuned = load_checkpoint_or_gpt2(seed_path), load_checkpoint_or_gpt2(end)
    try:
        check_parents(seed, finetuned)
    except ParentMismatch as exc:
        raise SweepError(BAD_CONFIG if exc.what == "tokenizer" else BAD_DATA, str(exc))
    state = interpolate_state(plain_weights(seed), plain_weights(finetuned), member.alpha)
    seed_sha, end_sha = _sha256(seed_path), _sha256(end)
    said = (f"interpolated at alpha={member.alpha:g} between {seed_path} (sha256 {seed_sha[:12]}..) and "
            f"{end} (sha256 {end_sha[:12]}..), member {member.parent.name}'s end")
    meta = {"interpolation": {"alpha": member.alpha, "seed": {"path": str(seed_path), "sha256": seed_sha},
                              "finetuned": {"path": str(end), "sha256": end_sha}, "said": said,
                              "sweep_member": member.name, "parent_member": member.parent.name}}
    if "trunk_reference" in finetuned.meta:
        meta["trunk_reference"] = finetuned.meta["trunk_reference"]
    return save_checkpoint(target, model_state=state, model_config=interpolated_config(seed), tokenizer=seed.tokenizer, meta=meta)


def write_ready(sweep_dir: Path, members: list[InterpolatedMember], say) -> None:
    """The coordinator's pass: every interpolated checkpoint whose parent has just got its end."""
    for member in members:
        if not (member.directory(sweep_dir) / "manifest.json").is_file() and write_checkpoint(sweep_dir, member):
            say(f"{member.name}: interpolated (alpha {member.alpha:g}) from {member.parent.name}'s end")


def _end_step(run_dir: Path) -> int:
    steps = [record.step for record in read_run(run_dir).evals]
    return max(steps, default=0)


def interpolated_result(member: InterpolatedMember, sweep_dir: Path, required: tuple[str, ...] = ()) -> MemberResult:
    """As analysis.member_result's, without what only a daemon run has: no verdict, no evals during
    training (`evals` None), no common-step lines; `steps` is its parent's end step."""
    state, end = _parent_end(member)
    result = MemberResult(member=member.name, config=member.config_key, seed=member.seed, values=member.values,
                          state=state if state in TERMINAL else "pending", verdict=None, interpolated=True,
                          alpha=member.alpha, parent=member.parent.name)
    ckpt = write_checkpoint(sweep_dir, member) if end is not None else None
    if ckpt is None:
        return result
    cache = SweepDir(sweep_dir).scores
    lines = {"base": score_checkpoint(Path(member.env["TATU_SEED_CKPT"]), member.env, cache, required),
             "end": score_checkpoint(ckpt, member.env, cache, required)}
    parent_config = member.config_key.removesuffix(f"-a{member.alpha:g}")
    return dataclasses.replace(
        result, lines=lines, steps=_end_step(member.parent.run_dir),
        trainable=f"none: interpolated, (1-{member.alpha:g}) seed + {member.alpha:g} {parent_config}'s end")
