"""The training loop of a tatu run, top to bottom.

    config -> data manifest + tokenizer check -> seed checkpoint (or a fresh trunk)
    -> resume state if the run dir has one, else the step-0 baseline eval
    -> READY -> steps of SFT_GE + REPLAY_N micro-batches with a token-weighted loss
    -> every EVAL_EVERY steps: eval, drift, best, abort -> every TATU_CKPT_EVERY: resume state
    -> at MIX_STEPS_LIMIT: final checkpoint and verdict.

Who does what: the Trainer (trainer.py) takes steps; the Judge (judge.py) turns an eval
into drift, best, abort and the verdict; the Supervisor (supervisor.py) is what systemd and
the operator see. Failures raise their layer's exception; daemon/main.py maps them to exit codes.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager

from tatu import exitcodes
from tatu.daemon import distributed, judge
from tatu.daemon.config import ConfigError, RunConfig, describe
from tatu.atomic import write_json_atomic
from tatu.daemon.logs import RunLog
from tatu.daemon.start import check_same_eval_files, starting_point, trunk_reference_for
from tatu.daemon.state import RunState, restore_resume, results_to_json, save_resume
from tatu.daemon.suite import best_set, generate_samples, load_suite, score_suite
from tatu.daemon.trainer import Trainer
from tatu.data.manifest import check_tokenizer, load_manifest
from tatu.data.stream import MixedStream
from tatu.model.checkpoint import NonFiniteTensorError, save_checkpoint
from tatu.model.device import DeviceError, resolve_device
from tatu.storage import StorageError, is_storage_error, storage_error, tree_bytes


class NonFiniteError(RuntimeError):
    """NaN or inf in a loss, a gradient, the weights or an eval: exit 11; nothing non-finite was saved."""


def non_finite_paths(value, path: str = "") -> list[str]:
    """Where a JSON-like value holds a NaN or an inf ("sets.enRuler.ppl")."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [path or "value"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in non_finite_paths(v, f"{path}[{i}]")]
    return []


def run(config: RunConfig, origins: dict[str, str], log: RunLog) -> int:
    try:
        device = resolve_device(config.device)
    except DeviceError as exc:
        raise ConfigError(f"TATU_DEVICE={exc}") from None
    world, device = distributed.join(config, device)  # alone: SINGLE, the device unchanged
    try:
        code = _run(config, origins, distributed.log_for(world, log), world, device)
        world.barrier()  # no rank leaves (and gets its peers killed by torchrun) while rank 0 still writes
        return code
    finally:
        distributed.leave(world)


def _run(config: RunConfig, origins: dict[str, str], log: RunLog, world: distributed.World, device) -> int:
    log.info(f"tatu run {config.run} ({config.mode}) -> {config.run_dir}  config {config.hash}")
    for line in describe(config, origins):
        log.info(line)
    manifest = load_manifest(config.data)
    start = starting_point(config, manifest)
    check_tokenizer(manifest, config.data, start.tokenizer.hash, model=f"checkpoint {config.seed_ckpt}")
    if config.seq_len > start.gpt_config.block_size:
        raise ConfigError(f"TATU_SEQ_LEN={config.seq_len} exceeds the model's block_size {start.gpt_config.block_size}")

    with distributed.supervisor_for(world, config, origins) as supervisor:
        stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len,
                             seed=config.seed, tokenizer_hash=start.tokenizer.hash)
        suite = load_suite(config, manifest, start.tokenizer)
        trainer = Trainer(config, start.gpt_config, device, start.weights, start.weights_source, world)
        log.info(f"model {trainer.model.num_params() / 1e6:.2f}M params on {device}; "
                 f"mix {config.mix} x {config.micro_batch} x {config.seq_len}"
                 + (f"; {world.size} ranks (torchrun)" if world.distributed else ""))
        if start.resume is not None:
            saved = start.resume.extra_json["resume"]
            check_same_eval_files(saved.get("eval_files"), suite)
            distributed.check_resume_world(saved, world, config.run)
            restore_resume(start.resume, trainer.optimizer, stream)
            distributed.restore_rank_state(saved, start.resume.extra_tensors, stream, world)
            state = RunState.from_json(saved, config.eval_resamples, config.seed)
            log.info(f"resumed from step {state.step}")
            log.event("resumed", step=state.step)
        else:
            state = RunState(trunk_reference=trunk_reference_for(config, start, suite, device, log),
                             eval_files=suite.file_hashes)
        # Every input is checked (data, eval sets, weights, the trunk): only now does the run leave a trace.
        log.attach(config.run_dir)
        if state.trunk_reference is None:
            log.info("drift_tronco: n/a (the seed carries no trunk reference and TATU_TRUNK_CKPT is not set)")
        supervisor.state = state
        meta_base = {"config": config.to_json(), "mode": config.mode, "run": config.run,
                     "seed_meta_step": start.seed_meta.get("step")}
        return Run(config, log, supervisor, trainer, stream, suite, start.tokenizer, state, meta_base, world).train()


class Run:
    """One run's pieces and what it does besides a step: evaluate, save, finish."""

    def __init__(self, config, log, supervisor, trainer, stream, suite, tokenizer, state: RunState, meta_base: dict,
                 world: distributed.World = distributed.SINGLE):
        self.config, self.log, self.supervisor, self.trainer = config, log, supervisor, trainer
        self.world = world  # under torchrun, rank 0 alone writes files
        self.stream, self.suite, self.tokenizer, self.state = stream, suite, tokenizer, state
        self.meta_base = meta_base
        self.last_saved_step = state.step
        self.latest_results: dict = {}  # the last eval's results (a trunk stores them)

    def train(self) -> int:
        config, log, supervisor, state = self.config, self.log, self.supervisor, self.state
        limit = config.mix_steps_limit
        if state.history:
            supervisor.publish_eval(state.history[-1], state.best)
        supervisor.begin(state.step)
        if state.aborted:  # an abort is final: never train past it
            log.error(f"run {config.run} was aborted at step {state.aborted['step']}: {state.aborted['reason']}; "
                      f"start a new TATU_RUN")
            return state.aborted["code"]
        if state.step >= limit and (config.run_dir / "verdict.json").exists():
            supervisor.finished_already(state.step)
            log.info(f"run {config.run} already finished at step {state.step}; nothing to do")
            return exitcodes.OK
        if supervisor.stop_requested and state.baseline is None:
            log.info("stop requested before the baseline eval: nothing to save")
            supervisor.phase("stopped")
            return exitcodes.OK
        if state.baseline is None:  # step 0: the run's own baseline, never recomputed after a restart
            supervisor.phase("baseline")
            log.info("baseline eval at step 0")
            self.evaluate()
            self.save("baseline")
        supervisor.ready()
        log.event("ready", step=state.step, limit=limit)

        self.trainer.model.train()
        while state.step < limit:
            self.world.at_step_boundary(supervisor)  # under torchrun: every rank acts on the same requests
            if supervisor.stop_requested:
                supervisor.stopping()
                log.info(f"stop requested at step {state.step}: saving the resume state")
                self.save("stop")
                supervisor.phase("stopped")
                return exitcodes.OK
            supervisor.phase("training")
            stats = self.trainer.step(self.stream.next_step(), state.step + 1)
            if not stats.finite:
                what = "loss" if not math.isfinite(stats.loss) else "gradient norm"
                value = stats.loss if what == "loss" else stats.grad_norm
                log.error(f"non-finite {what} {value} at step {stats.step} (not applied): stopping; "
                          f"the last saved state (step {self.last_saved_step}) is intact")
                log.event("abort", step=stats.step, reason=f"non-finite {what}", loss=str(stats.loss),
                          grad_norm=str(stats.grad_norm))
                supervisor.phase("aborted")
                return exitcodes.NONFINITE_LOSS
            if stats.skipped:
                log.warning(f"step {stats.step}: no target tokens in any micro-batch; optimizer step skipped")
            state.step = step = stats.step
            mem = supervisor.tick(stats)
            log.event("step", step=step, loss=stats.loss, lr=stats.lr, tokens=stats.target_tokens,
                      replay_fraction=stats.replay_fraction, seconds=round(stats.seconds, 4), memory=mem)

            if step % config.eval_every == 0 or step == limit or supervisor.eval_requested:
                supervisor.clear_eval_request()
                decision = self.evaluate()
                if decision.abort_reason:
                    log.error(f"ABORT at step {step}: {decision.abort_reason}")
                    log.event("abort", step=step, reason=decision.abort_reason)
                    state.aborted = {"step": step, "reason": decision.abort_reason, "code": exitcodes.FORGET_ABORT}
                    self.save("forget abort")
                    return self.finish(exitcodes.FORGET_ABORT, decision.abort_reason)
            low_memory = supervisor.memory_low and step - self.last_saved_step >= config.eval_every
            if low_memory:
                log.warning(f"available memory {mem['available_mb']:.0f} MB < TATU_MEM_FLOOR_MB {config.mem_floor_mb}: saving early")
            if step % config.ckpt_every == 0 or supervisor.checkpoint_requested or low_memory or step == limit:
                supervisor.clear_checkpoint_request()
                self.save("low memory" if low_memory else "scheduled")

        self.final_checkpoint()
        return self.finish(exitcodes.OK)

    def meta(self, **extra) -> dict:
        return {**self.meta_base, "step": self.state.step, "trunk_reference": results_to_json(self.state.trunk_reference),
                **extra}

    def evaluate(self) -> judge.Decision:
        state, model, config = self.state, self.trainer.model, self.config
        with self.supervisor.long_operation("eval"):
            started = time.perf_counter()
            model.eval()
            results = {}
            for done, name in enumerate(self.suite.sets):
                self.supervisor.eval_progress(state.step, done, len(self.suite.sets))
                results.update(score_suite(model, self.suite, self.trainer.device, config, only=(name,),
                                            map_batches=self.world.map_batches))
            # A poisoned model (ppl inf, or so huge its CI overflows): no decision, best or save can come of it.
            broken = {name: r.ppl for name, r in results.items()
                      if not all(math.isfinite(x) for x in (r.ppl, r.ci.lo, r.ci.hi, r.ci.se))}
            if broken:
                self.non_finite_eval(broken)
            samples = (generate_samples(model, self.suite, self.tokenizer, self.trainer.device, config)
                       if self.world.is_main else None)
            model.train()
            self.latest_results = results
            if state.baseline is None:
                state.baseline = results
            decision = judge.decide(state.step, results, state, self.suite, config, time.perf_counter() - started, samples)
        where = non_finite_paths(decision.record)
        if where:  # a statistic of the eval overflowed: the record could not be saved, nor trusted
            self.non_finite_eval({name: r.ppl for name, r in results.items()}, where)
        state.history.append(decision.record)
        if decision.best:
            key = best_set(config.mode)
            state.best = {"step": state.step, "set": key, "ppl": results[key].ppl}
            if self.world.is_main:
                with self.saving("best"):
                    save_checkpoint(config.run_dir / "best", model=model, model_config=self.trainer.gpt_config,
                                    tokenizer=self.tokenizer, meta=self.meta(best=state.best))
        self.log.info(decision.line)
        for warning in decision.record["warnings"]:
            self.log.warning(warning)
        self.log.event("eval", **decision.record)
        self.supervisor.publish_eval(decision.record, state.best)
        return decision

    def non_finite_eval(self, ppl: dict[str, float], where: list[str] | None = None) -> None:
        step = self.state.step
        self.log.event("abort", step=step, reason="non-finite eval", ppl={k: str(v) for k, v in ppl.items()})
        self.supervisor.phase("aborted")
        detail = f"; not finite: {', '.join(where[:3])}" if where else ""
        raise NonFiniteError(f"eval at step {step}: ppl {ppl} (the model's outputs are not finite, or so far off "
                             f"that its statistics overflow{detail}): stopping; the last saved state "
                             f"(step {self.last_saved_step}) is intact")

    @contextmanager
    def saving(self, name: str):
        """A save of run_dir/name: refused when a tensor is not finite (exit 11) or the disk is full
        (exit 74), either way with the previous copy intact; its size feeds the free-space warning."""
        try:
            yield
        except NonFiniteTensorError as exc:
            self.supervisor.phase("aborted")
            self.log.event("abort", step=self.state.step, reason="non-finite tensor", detail=str(exc))
            raise NonFiniteError(f"step {self.state.step}: {exc}; the last saved state "
                                 f"(step {self.last_saved_step}) is intact") from None
        except StorageError:
            self.supervisor.phase("disk full")
            raise
        warning = self.supervisor.saved(name, tree_bytes(self.config.run_dir / name))
        if warning:
            self.log.warning(warning)

    def save(self, reason: str) -> None:
        ranks = distributed.rank_states_for_saving(self.world.gather_rank_states(self.stream))
        if not self.world.is_main:
            self.last_saved_step = self.state.step
            return
        with self.supervisor.long_operation("checkpoint"), self.saving("state"):
            save_resume(self.config.run_dir, model=self.trainer.model, optimizer=self.trainer.optimizer,
                        gpt_config=self.trainer.gpt_config, tokenizer=self.tokenizer, run_state=self.state,
                        stream_state=self.stream.state_dict(), meta=self.meta(), ranks=ranks)
        self.last_saved_step = self.state.step
        self.log.info(f"saved resume state at step {self.state.step} ({reason})")
        self.log.event("checkpoint", step=self.state.step, reason=reason)

    def final_checkpoint(self) -> None:
        """The final weights; a trunk stores its reference metrics with them."""
        if not self.world.is_main:
            return
        meta = self.meta()
        if self.config.mode == "pretrain":  # the step == limit eval ran just before: its scores are the trunk's
            if not self.latest_results:  # resumed after that eval: score the final weights again
                self.trainer.model.eval()
                self.latest_results = score_suite(self.trainer.model, self.suite, self.trainer.device, self.config)
            meta["trunk_reference"] = results_to_json(judge.trunk_reference(self.latest_results))
        with self.saving("final"):
            save_checkpoint(self.config.run_dir / "final", model=self.trainer.model,
                            model_config=self.trainer.gpt_config, tokenizer=self.tokenizer, meta=meta)
        self.log.info(f"final checkpoint: {self.config.run_dir / 'final'}")

    def finish(self, code: int, abort_reason: str | None = None) -> int:
        verdict = judge.verdict(self.state.history, abort_reason, self.config)
        if not self.world.is_main:
            return code
        try:
            write_json_atomic(self.config.run_dir / "verdict.json", verdict)  # never a half-written verdict
        except OSError as exc:
            if is_storage_error(exc):
                raise storage_error(self.config.run_dir / "verdict.json", exc, "verdict") from None
            raise
        self.log.info(verdict["line"])
        self.log.event("verdict", step=self.state.step, **verdict)
        self.supervisor.phase("aborted" if abort_reason else "done")
        return code
