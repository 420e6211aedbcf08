"""The training loop of a tatu run, top to bottom.

    config -> data manifest + tokenizer check -> seed checkpoint (or a fresh trunk)
    -> resume state if the run dir has one, else the step-0 baseline eval
    -> READY -> steps of SFT_GE + REPLAY_N micro-batches with a token-weighted loss
    -> every EVAL_EVERY steps: eval, drift, best, abort -> every TATU_CKPT_EVERY: resume state
    -> at MIX_STEPS_LIMIT: final checkpoint and verdict.

Who does what: the Trainer (trainer.py) takes steps; the Judge (judge.py) turns an eval
into drift, best, abort and the verdict; the Supervisor (supervisor.py) is what systemd and
the operator see; RunActions (actions.py) evaluates, saves and finishes. Failures raise their
layer's exception; daemon/main.py maps them to exit codes.
"""
from __future__ import annotations

import math

from tatu import exitcodes
from tatu.daemon import distributed, ranks
from tatu.daemon.actions import RunActions
from tatu.daemon.config import ConfigError, RunConfig, describe
from tatu.daemon.logs import RunLog
from tatu.daemon.start import (check_same_eval_files, check_same_precision, lr_schedule_end, lr_schedule_note,
                               starting_point, trunk_reference_for)
from tatu.daemon.resume import restore_resume
from tatu.daemon.run.lock import RunDirLock
from tatu.daemon.run.records import Abort
from tatu.daemon.run.state import RunState
from tatu.daemon.retention import setup as retention
from tatu.daemon.retention.anchor import SWAMPS
from tatu.daemon.suite import load_suite
from tatu.daemon.tensorboard import attach as attach_tensorboard
from tatu.daemon.trainer import Trainer, build_model, run_precision
from tatu.data.manifest import check_tokenizer, load_manifest
from tatu.data.stream import MixedStream
from tatu.model import cpu_sums
from tatu.model.device import DeviceError, resolve_device, set_threads
from tatu.model.train_spec import TrainSpecError


def run(config: RunConfig, origins: dict[str, str], log: RunLog, fresh: bool = False, env_file: str | None = None) -> int:
    """The run; `fresh` (tatu smoke): whatever its run dir holds is removed first, under its lock;
    `env_file`: the file its variables came from, if any (named in what its CIs cover)."""
    try:
        device = resolve_device(config.device)
    except DeviceError as exc:
        raise ConfigError(f"TATU_DEVICE={exc}") from None
    world, device = distributed.join(config, device)  # alone: SINGLE, the device unchanged
    lock = RunDirLock(config.run_dir, active=world.is_main)  # rank 0 writes, so rank 0 holds the run dir
    try:
        code = _run(config, origins, ranks.log_for(world, log), world, device, lock, fresh, env_file)
        world.barrier()  # no rank leaves (and gets its peers killed by torchrun) while rank 0 still writes
        return code
    finally:
        lock.release()  # an in-process run (tests, benches) frees it for the next; a process's death does anyway
        distributed.leave(world)


def _run(config: RunConfig, origins: dict[str, str], log: RunLog, world: distributed.World, device,
         lock: RunDirLock, fresh: bool, env_file: str | None) -> int:
    log.info(f"tatu run {config.run} ({config.mode}) -> {config.run_dir}  config {config.hash}")
    for line in describe(config, origins):
        log.info(line)
    threads, threads_source = set_threads(config.threads)
    log.info(f"torch threads: {threads} ({threads_source})")
    sums, sums_line = cpu_sums.settle()  # before the run's first matmul
    log.info(sums_line)
    manifest = load_manifest(config.data)
    lock.take_existing(empty=fresh)  # before the resume state is read
    start = starting_point(config, manifest)
    check_tokenizer(manifest, config.data, start.tokenizer.hash, model=f"checkpoint {config.seed_ckpt}")
    try:
        config.train_spec.check_model(start.gpt_config.n_layer)  # K and the LoRA blocks against the model's depth
    except TrainSpecError as exc:
        raise ConfigError(f"{exc}") from None
    if config.seq_len > start.gpt_config.block_size:
        source = origins.get("TATU_SEQ_LEN", "?")
        why = (f"the data's manifest ({config.data}, built with --seq-len {config.seq_len})" if source == "data"
               else f"[{source}]")
        raise ConfigError(f"TATU_SEQ_LEN={config.seq_len} from {why} exceeds the seed's block_size "
                          f"{start.gpt_config.block_size}: set TATU_SEQ_LEN={start.gpt_config.block_size} "
                          f"(pairs longer than it are then refused, naming the pair) or rebuild the data with "
                          f"--seq-len {start.gpt_config.block_size}")

    with ranks.supervisor_for(world, config, origins) as supervisor:
        stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len,
                             seed=config.seed, tokenizer_hash=start.tokenizer.hash, replay_sources=config.replay_sources)
        suite = load_suite(config, manifest, start.tokenizer)
        # The step's parts, built in order: the model, the retention terms on it (TATU_ANCHOR / TATU_DISTILL:
        # daemon/retention/), then the Trainer that steps it, given the terms.
        precision = run_precision(config, device)
        model = build_model(config, start.gpt_config, device, start.weights, start.weights_source)
        if start.resume is not None:  # a restart continues the same run (78) before its terms are read again
            _check_resume(config, start.resume, precision, suite, world)
        terms = retention.build(config.retention, config.retention_facts, model, start.gpt_config, precision,
                                start.weights, _saved_retention(start.resume), device)
        trainer = Trainer(config, start.gpt_config, device, world=world, model=model,
                          anchor=terms.anchor if terms is not None else None,
                          distiller=terms.distiller if terms is not None else None)
        log.info(f"model {trainer.model.num_params() / 1e6:.2f}M params on {device}; "
                 f"mix {config.mix} x {config.micro_batch} x {config.seq_len}"
                 + (f"; replay from {config.replay_sources.describe()} of its micro-batches" if config.replay_sources else "")
                 + (f"; {world.size} ranks (torchrun)" if world.distributed else ""))
        trainable = trainer.summary
        log.info(trainable["line"])
        if world.distributed:
            tensors, size = world.reduced_per_step(trainer.forward_model)
            log.info(f"all-reduce per step: {tensors} tensors, {size} bytes (frozen weights are not reduced)")
        log.info(f"precision {trainer.precision.name} [{_precision_source(trainer.precision, origins)}]")
        if start.resume is not None:
            state = _resumed(config, start.resume, trainer, stream, world, log)
        else:
            state = RunState(trunk_reference=trunk_reference_for(config, start, suite, device, log),
                             eval_files=suite.file_hashes, lr_schedule_end=config.mix_steps_limit)
        trainer.lr_schedule_end = state.lr_schedule_end
        # Every input is checked (data, eval sets, weights, the trunk): only now does the run leave a trace.
        lock.take_created(resumed=start.resume is not None)
        log.attach(config.run_dir)
        if world.is_main:  # rank 0 alone writes the run's files
            attach_tensorboard(config, origins, log)
        # origins and ranks say how the run was started: `tatu status` after the run names the command resuming it
        log.event("config", step=state.step, config=config.to_json(), origins=origins, ranks=world.size)
        _retention_started(terms, config, world, state, log)
        if suite.category_note:
            log.info(suite.category_note)
        if state.trunk_reference is None:
            log.info("drift_tronco: n/a (the seed carries no trunk reference and TATU_TRUNK_CKPT is not set)")
        supervisor.state = state
        supervisor.describe_training(trainable["line"] + (f"; {terms.line}" if terms is not None else ""))
        meta_base = {"config": config.to_json(), "mode": config.mode, "run": config.run,
                     "seed_meta_step": start.seed_meta.get("step"), "trainable": trainable, "threads": threads,
                     "mkl_cbwr": sums, "precision": trainer.precision.name,
                     **({"seed_terms": {**terms.record, "line": terms.line}} if terms is not None else {})}
        return train(RunActions(config, log, supervisor, trainer, stream, suite, start.tokenizer, state, meta_base, world,
                                env_file))


def _retention_started(terms, config: RunConfig, world: distributed.World, state: RunState, log: RunLog) -> None:
    """TATU_ANCHOR / TATU_DISTILL once the run dir exists: a new EWC run's Fisher file (rank 0 writes),
    the record into the resume state, the start lines (daemon/retention/setup.py)."""
    if terms is None:
        return
    if world.is_main:
        terms.write_pending(config.run_dir)
    state.retention = terms.record
    for line in [terms.line, *terms.notes]:
        log.info(line)


def _check_resume(config: RunConfig, resume, precision, suite, world: distributed.World) -> None:
    """A restart continues the same run: the same precision, eval files and world size (else 78)."""
    check_same_precision(resume.meta.get("precision"), precision, config.run)
    saved = resume.extra_json["resume"]
    check_same_eval_files(saved.get("eval_files"), suite)
    ranks.check_resume_world(saved, world, config.run)


def _saved_retention(resume) -> dict | None:
    """A restart's record of its retention terms (RunState.retention, saved as "seed_terms"); None for a new run."""
    return None if resume is None else resume.extra_json["resume"].get("seed_terms")


def _resumed(config: RunConfig, resume, trainer: Trainer, stream: MixedStream, world: distributed.World,
             log: RunLog) -> RunState:
    """The run as its resume state left it (the restart was checked to continue the same run: _check_resume)."""
    saved = resume.extra_json["resume"]
    restore_resume(resume, trainer.optimizer, stream)
    ranks.restore_rank_state(saved, resume.extra_tensors, stream, world)
    state = RunState.from_json(saved, config.eval_resamples, config.seed)
    state.lr_schedule_end = lr_schedule_end(state.lr_schedule_end, resume.meta.get("config", {}), config)
    log.info(f"resumed from step {state.step}")
    log.event("resumed", step=state.step)
    note = lr_schedule_note(state.lr_schedule_end, state.step, config)
    if note:  # a changed MIX_STEPS_LIMIT under a cosine: what the steps past the curve's end get
        log.warning(note)
    return state


def _precision_source(precision, origins: dict[str, str]) -> str:
    """"auto: cpu has amx_bf16" as resolved, or where an explicit TATU_PRECISION came from."""
    origin = origins.get("TATU_PRECISION", "default")
    return precision.reason if precision.reason.startswith("auto") and origin == "default" else f"{origin}: {precision.reason}"


def _evaluate(actions: RunActions, step: int) -> int | None:
    """An eval at `step`; the exit code when it aborts the run (drift over MIX_FORGET_LIMIT, or its
    forecast's lower bound with MIX_FORECAST_ABORT=1: the same exit 10, the reason says which)."""
    decision = actions.evaluate()
    if not decision.abort_reason:
        return None
    actions.log.error(f"ABORT at step {step}: {decision.abort_reason}")
    by_forecast = {"by": "forecast", "forecast": decision.record.forecast.to_json()} if decision.by_forecast else {}
    actions.log.event("abort", step=step, reason=decision.abort_reason, code=exitcodes.FORGET_ABORT, **by_forecast)
    actions.state.aborted = Abort(step, decision.abort_reason, exitcodes.FORGET_ABORT)
    actions.save("forget abort")
    return actions.finish(exitcodes.FORGET_ABORT, decision.abort_reason)


def _save_if_due(actions: RunActions, step: int, mem: dict) -> None:
    """The resume state on schedule, on request, at the last step, or early when memory runs low."""
    config, supervisor = actions.config, actions.supervisor
    low_memory = supervisor.requests.memory_low and step - actions.last_saved_step >= config.eval_every
    if low_memory:
        actions.log.warning(f"available memory {mem['available_mb']:.0f} MB < TATU_MEM_FLOOR_MB {config.mem_floor_mb}: saving early")
    if step % config.ckpt_every == 0 or supervisor.requests.checkpoint or low_memory or step == config.mix_steps_limit:
        supervisor.served("checkpoint")
        actions.save("low memory" if low_memory else "scheduled")


def _before_training(actions: RunActions) -> int | None:
    """A restart's checks (aborted, finished, stopped before its baseline), the step-0 baseline,
    READY; the exit code when there is nothing to train."""
    config, log, supervisor, state = actions.config, actions.log, actions.supervisor, actions.state
    limit = config.mix_steps_limit
    if state.history:
        supervisor.publish_eval(state.history[-1], state.best)
    supervisor.begin(state.step)
    if state.aborted:  # an abort is final: never train past it
        log.error(f"run {config.run} was aborted at step {state.aborted.step}: {state.aborted.reason}; "
                  f"start a new TATU_RUN")
        return state.aborted.code
    if state.step >= limit and actions.files.verdict_file.exists():
        supervisor.finished_already(state.step)
        log.info(f"run {config.run} already finished at step {state.step}; nothing to do")
        return exitcodes.OK
    if supervisor.requests.stop and state.baseline is None:
        log.info("stop requested before the baseline eval: nothing to save")
        supervisor.phase("stopped")
        return exitcodes.OK
    if state.baseline is None:  # step 0: the run's own baseline, never recomputed after a restart
        supervisor.phase("baseline")
        log.info("baseline eval at step 0")
        actions.evaluate()
        actions.save("baseline")
    supervisor.ready()
    log.event("ready", step=state.step, limit=limit, precision=actions.trainer.precision.name)
    return None


def train(actions: RunActions) -> int:
    """The steps, top to bottom: baseline, READY, then step, eval, save until the limit or a stop."""
    config, log, supervisor, state = actions.config, actions.log, actions.supervisor, actions.state
    limit = config.mix_steps_limit
    code = _before_training(actions)
    if code is not None:
        return code

    actions.trainer.model.train()
    swamp_said = False  # the retention term's warning, once per start
    while state.step < limit:
        actions.world.at_step_boundary(supervisor)  # under torchrun: every rank acts on the same requests
        if supervisor.requests.stop:
            supervisor.stopping()
            log.info(f"stop requested at step {state.step}: saving the resume state")
            actions.save("stop")
            supervisor.phase("stopped")
            return exitcodes.OK
        supervisor.phase("training")
        stats = actions.trainer.step(actions.stream.next_step(), state.step + 1)
        if not stats.finite:
            what = "loss" if not math.isfinite(stats.loss) else "gradient norm"
            value = stats.loss if what == "loss" else stats.grad_norm
            log.error(f"non-finite {what} {value} at step {stats.step} (not applied): stopping; "
                      f"the last saved state (step {actions.last_saved_step}) is intact")
            log.event("abort", step=stats.step, reason=f"non-finite {what}", code=exitcodes.NONFINITE_LOSS, loss=str(stats.loss),
                      grad_norm=str(stats.grad_norm))
            supervisor.phase("aborted")
            return exitcodes.NONFINITE_LOSS
        if stats.skipped:
            log.warning(f"step {stats.step}: no target tokens in any micro-batch; optimizer step skipped")
        state.step = step = stats.step
        mem = supervisor.tick(stats)
        log.event("step", step=step, loss=stats.loss, lr=stats.lr, grad_norm=stats.grad_norm, tokens=stats.target_tokens,
                  tokens_per_s=stats.tokens_per_s, replay_fraction=stats.replay_fraction,
                  seconds=round(stats.seconds, 4), memory=mem, **stats.retention,
                  **({"replay_tokens": stats.replay_tokens} if stats.replay_tokens else {}))
        if not swamp_said and _swamps(stats):
            swamp_said = True
            line = _swamp_line(stats, config)
            log.warning(line)
            supervisor.warn(line)

        if step % config.eval_every == 0 or step == limit or supervisor.requests.eval:
            supervisor.served("eval")
            code = _evaluate(actions, step)
            if code is not None:
                return code
        _save_if_due(actions, step, mem)

    actions.final_checkpoint()
    return actions.finish(exitcodes.OK)


def _swamps(stats) -> bool:
    """The anchor's gradient outweighs the data's by more than SWAMPS (daemon/retention/anchor.py)."""
    return stats.grad_norm_penalty is not None and stats.grad_norm_penalty > SWAMPS * stats.grad_norm_data


def _swamp_line(stats, config: RunConfig) -> str:
    ratio = stats.grad_norm_penalty / stats.grad_norm_data if stats.grad_norm_data > 0 else math.inf
    return (f"step {stats.step}: TATU_ANCHOR={config.anchor}'s gradient norm {stats.grad_norm_penalty:.4g} is "
            f"{ratio:.0f}x the data's {stats.grad_norm_data:.4g} (more than {SWAMPS:g}x): the run is learning the "
            f"penalty, not the data; lower TATU_ANCHOR_WEIGHT (now {config.anchor_weight:g})")
