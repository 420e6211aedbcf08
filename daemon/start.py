"""Where a run starts from, and the checks that a restart continues the same run.

A new run starts from TATU_SEED_CKPT (or, for a trunk, from random weights); a restarted run
from its own resume state, which holds the weights: the seed is not read again.
"""
from __future__ import annotations

from dataclasses import dataclass

from tatu.daemon.config import ConfigError, RunConfig
from tatu.daemon.judge import trunk_reference
from tatu.daemon.resume import load_resume
from tatu.daemon.run.paths import RunDir
from tatu.daemon.run.state import is_results_json, results_from_json
from tatu.daemon.suite import REFERENCE_SETS, Suite, score_suite
from tatu.daemon.trainer import lr_at
from tatu.data.manifest import DataConfigError, DataError
from tatu.evals.scoring import SetResult
from tatu.model.checkpoint import Checkpoint, CheckpointError
from tatu.model.gpt import GPTConfig
from tatu.model.hf import load_checkpoint_or_gpt2
from tatu.model.precision import Precision
from tatu.model.tokenizer import Tokenizer
from tatu.model.tokenizer_json import load_tokenizer

# What may change when a run is restarted: when and how often things happen, not what is
# measured or how it is trained (a changed limit or LR would make the verdict meaningless).
# MIX_STEPS_LIMIT moves the stop, not the LR curve: the state keeps the schedule's end (lr_schedule_end).
# TATU_PRECISION may be spelled another way (auto -> bf16) as long as it resolves to the
# precision the run trained in: check_same_precision compares what it resolved to.
RESUMABLE_CHANGES = frozenset({"MIX_STEPS_LIMIT", "TATU_CKPT_EVERY", "TATU_MEM_FLOOR_MB", "TATU_DEVICE",
                               "EVAL_EVERY", "TATU_GEN_PROMPTS", "TATU_GEN_TOKENS", "TATU_FAULT_NAN_STEP",
                               "TATU_PRECISION",
                               "TATU_EVAL_LINES",  # which eval scores are kept on disk, not what they are
                               "TATU_TENSORBOARD",  # where the run's numbers are also shown, not what they are
                               "TATU_THREADS"})  # like TATU_DEVICE: how the sums are computed (the last bits)


@dataclass
class Start:
    gpt_config: GPTConfig
    weights: dict | None  # None: a trunk from random weights
    weights_source: str  # the file the weights came from, for error messages
    tokenizer: Tokenizer
    seed_meta: dict  # what the seed checkpoint says about itself (its step, its trunk reference)
    resume: Checkpoint | None  # the run's own resume state, when it has one


def starting_point(config: RunConfig, manifest: dict) -> Start:
    if RunDir(config.run_dir).has_resume():
        try:
            resume = load_resume(config.run_dir, "cpu")
        except CheckpointError as exc:
            raise CheckpointError(f"resume state: {exc}") from None
        check_same_config(resume.meta.get("config", {}), config)
        return Start(resume.model_config, resume.model_state, str(resume.path), resume.tokenizer,
                     {"step": resume.meta.get("seed_meta_step")}, resume)
    if config.seed_ckpt is not None:
        seed = load_checkpoint_or_gpt2(config.seed_ckpt)
        gpt_config = GPTConfig(**{**seed.model_config.to_dict(), "dropout": config.dropout, "attn": "sdpa"})
        return Start(gpt_config, seed.plain_state(), str(config.seed_ckpt), seed.tokenizer, seed.meta, None)
    tokenizer = load_tokenizer(config.data / manifest.get("tokenizer", "tokenizer.json"))
    gpt_config = GPTConfig(
        vocab_size=tokenizer.vocab_size, block_size=config.block_size, n_layer=config.n_layer,
        n_head=config.n_head, n_embd=config.n_embd, dropout=config.dropout,
    )
    return Start(gpt_config, None, "", tokenizer, {}, None)


def check_same_config(saved_config: dict, config: RunConfig) -> None:
    """A run continues only with the configuration it started with (but for its schedule)."""
    current = config.to_json()
    # A setting the saved run predates (TATU_TRAIN, TATU_LORA_*) held its default there.
    saved = {**RunConfig.defaults_json(), **saved_config}
    changed = sorted(k for k in set(saved) | set(current)
                     if saved.get(k) != current.get(k) and k not in RESUMABLE_CHANGES)
    if changed:
        shown = ", ".join(f"{k}: {saved.get(k)!r} -> {current.get(k)!r}" for k in changed[:4])
        raise ConfigError(f"run {config.run} was started with another configuration ({shown}); "
                          f"restore it, or start a new TATU_RUN")


def lr_schedule_end(stored: int | None, saved_config: dict, config: RunConfig) -> int:
    """The step a resumed run's LR schedule ends at: the one its state stored, never today's MIX_STEPS_LIMIT.

    The limit may change on a restart (RESUMABLE_CHANGES), but a cosine re-spanned over a longer run
    would jump up at the restart step: the curve stays, and a changed limit only moves the stop.
    A state saved before the end was stored: the MIX_STEPS_LIMIT it was saved with, the curve its
    last steps followed."""
    if stored is not None:
        return stored
    if "MIX_STEPS_LIMIT" in saved_config:
        return int(saved_config["MIX_STEPS_LIMIT"])
    if config.schedule == "constant":  # the end moves nothing under a constant LR
        return config.mix_steps_limit
    raise ConfigError(f"run {config.run}'s resume state records neither its LR schedule's end nor its "
                      f"MIX_STEPS_LIMIT, so TATU_SCHEDULE=cosine cannot continue its curve; start a new TATU_RUN "
                      f"with TATU_SEED_CKPT={RunDir(config.run_dir).state}")


def lr_schedule_note(end: int, step: int, config: RunConfig) -> str | None:
    """The one line a restart prints when MIX_STEPS_LIMIT no longer ends where the LR curve does
    (None under a constant LR, which the end does not move, or when nothing is left to train)."""
    limit = config.mix_steps_limit
    if config.schedule != "cosine" or limit == end or step >= limit:
        return None
    if limit > end:
        first = max(step, end) + 1
        return (f"MIX_STEPS_LIMIT={limit} is past the end of this run's cosine (step {end}, its first MIX_STEPS_LIMIT): "
                f"the curve is kept, so steps {first}-{limit} get TATU_MIN_LR={config.min_lr:g}; for a new cosine, "
                f"start a new TATU_RUN with TATU_SEED_CKPT={RunDir(config.run_dir).state}")
    return (f"MIX_STEPS_LIMIT={limit} stops this run before the end of its cosine (step {end}, its first "
            f"MIX_STEPS_LIMIT): the curve is kept, so its last step gets LR "
            f"{lr_at(limit - 1, config, end):.3g}, not TATU_MIN_LR={config.min_lr:g}")


def check_same_precision(saved: str | None, precision: Precision, run: str) -> None:
    """...and in the precision it trained in: a bf16 step and an fp32 step differ in every weight.
    A state saved before runs recorded their precision (None) carries nothing to compare."""
    if saved is not None and saved != precision.name:
        raise ConfigError(f"run {run} trained in {saved}, this start would train in {precision}; "
                          f"set TATU_PRECISION={saved} to continue it, or start a new TATU_RUN")


def check_same_eval_files(saved_files: dict | None, suite: Suite) -> None:
    """...and with the eval files its baseline was measured on."""
    moved = sorted(name for name, sha in (saved_files or {}).items() if suite.file_hashes.get(name) != sha)
    if moved:
        raise DataError(f"eval sets {moved} differ from those this run's baseline was measured on")


def trunk_reference_for(config: RunConfig, start: Start, suite: Suite, device, log) -> dict[str, SetResult] | None:
    """The trunk's scores for drift_tronco: an explicit TATU_TRUNK_CKPT wins over the seed's own."""
    if config.trunk_ckpt is None:
        stored = start.seed_meta.get("trunk_reference")
        if stored is not None and not is_results_json(stored):
            log.warning("the seed's trunk reference is in an older format: drift_tronco n/a (set TATU_TRUNK_CKPT)")
            return None
        return results_from_json(stored, config.eval_resamples, config.seed)
    try:
        trunk = load_checkpoint_or_gpt2(config.trunk_ckpt)
    except CheckpointError as exc:
        raise CheckpointError(f"TATU_TRUNK_CKPT: {exc}") from None
    if trunk.tokenizer.hash != start.tokenizer.hash:
        raise DataConfigError(f"TATU_TRUNK_CKPT {config.trunk_ckpt} uses tokenizer {trunk.tokenizer.hash[:12]}, "
                              f"the run uses {start.tokenizer.hash[:12]}: drift_tronco would compare different tokens")
    log.info(f"scoring the trunk {config.trunk_ckpt} for drift_tronco")
    trunk_model = trunk.build_model(device).eval()
    return trunk_reference(score_suite(trunk_model, suite, device, config, only=REFERENCE_SETS))
