"""What a run does besides a step: evaluate, save, finish. daemon/loop.py calls these in order.

Every write goes through `RunActions.saving`: a tensor that is not finite is never stored (exit 11) and a
full disk is a clean stop (exit 74), each with the previous copy intact.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager

from tatu import exitcodes
from tatu.atomic import write_json_atomic
from tatu.daemon import distributed, judge, ranks
from tatu.daemon.forecast import RunForecaster
from tatu.daemon.resume import save_resume
from tatu.daemon.run.paths import RunDir
from tatu.daemon.run.state import RunState, results_to_json
from tatu.daemon.suite import (best_set, generate_samples, score_answer_sets, score_categories, score_suite,
                               score_tasks)
from tatu.model.checkpoint import NonFiniteTensorError, save_checkpoint
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


class RunActions:
    """One run's pieces and what it does besides a step: evaluate, save, finish."""

    def __init__(self, config, log, supervisor, trainer, stream, suite, tokenizer, state: RunState, meta_base: dict,
                 world: distributed.World = distributed.SINGLE, env_file: str | None = None):
        self.config, self.log, self.supervisor, self.trainer = config, log, supervisor, trainer
        self.env_file = env_file  # where the run's variables came from, named in what its CIs cover
        self.covers_said = False  # the EVAL lines' CIs are described once per process, before the first
        self.world = world  # under torchrun, rank 0 alone writes files
        self.stream, self.suite, self.tokenizer, self.state = stream, suite, tokenizer, state
        self.meta_base = meta_base
        self.files = RunDir(config.run_dir)
        self.last_saved_step = state.step
        self.latest_results: dict = {}  # the last eval's results (a trunk stores them)
        self.forecaster = RunForecaster(config, state.lr_schedule_end)

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
            # rank 0 alone, like the generations: greedy answers need no sharing, and only rank 0 writes
            answers = score_answer_sets(model, self.suite, self.tokenizer) if self.world.is_main else {}
            model.train()
            self.latest_results = results
            categories = score_categories(self.suite, results, config)
            tasks = score_tasks(model, self.suite, self.tokenizer, self.trainer.device, self.world.map_batches)
            if state.baseline is None:
                state.baseline, state.category_baseline = results, categories
                state.task_baseline = {name: judge.task_items(r) for name, r in tasks.items()}
                state.answer_baseline = {name: judge.answer_bits(r) for name, r in answers.items()}
            forecast = self.forecaster.at_eval(state.step, results, state)
            decision = judge.decide(state.step, results, state, self.suite, config, time.perf_counter() - started, samples,
                                    categories, tasks, env_file=self.env_file, answers=answers, forecast=forecast)
        where = non_finite_paths(decision.record.to_json())
        if where:  # a statistic of the eval overflowed: the record could not be saved, nor trusted
            self.non_finite_eval({name: r.ppl for name, r in results.items()}, where)
        state.history.append(decision.record)
        if config.eval_lines and self.world.is_main:  # before the event: a reader who sees the eval finds its lines
            path = self.files.eval_lines(state.step)
            with self.saving(self.files.evals_dir):
                path.parent.mkdir(exist_ok=True)
                write_json_atomic(path, {"step": state.step, "sets": results_to_json(results),
                                         "categories": {name: results_to_json(per) for name, per in categories.items()}})
        if decision.best:
            state.best = judge.best_of(decision, results)
            if self.world.is_main:
                with self.saving(self.files.best):
                    self.save_weights(self.files.best, self.meta(best=state.best.to_json()))
        if not self.covers_said:  # the EVAL line (a contract) stays as it is; the journal gets this beside it
            self.log.info(f"what each eval's CIs cover: {decision.record.ci_covers['text']}")
            self.covers_said = True
        self.log.info(decision.line)
        for warning in decision.record.warnings:
            self.log.warning(warning)
        self.log.event("eval", **decision.record.to_json())
        self.supervisor.publish_eval(decision.record, state.best)
        return decision

    def non_finite_eval(self, ppl: dict[str, float], where: list[str] | None = None) -> None:
        step = self.state.step
        self.log.event("abort", step=step, reason="non-finite eval", code=exitcodes.NONFINITE_LOSS, ppl={k: str(v) for k, v in ppl.items()})
        self.supervisor.phase("aborted")
        detail = f"; not finite: {', '.join(where[:3])}" if where else ""
        raise NonFiniteError(f"eval at step {step}: ppl {ppl} (the model's outputs are not finite, or so far off "
                             f"that its statistics overflow{detail}): stopping; the last saved state "
                             f"(step {self.last_saved_step}) is intact")

    @contextmanager
    def saving(self, path):
        """A save of `path` (in the run dir): refused when a tensor is not finite (exit 11) or the disk is full
        (exit 74), either way with the previous copy intact; its size feeds the free-space warning."""
        try:
            yield
        except NonFiniteTensorError as exc:
            self.supervisor.phase("aborted")
            self.log.event("abort", step=self.state.step, reason="non-finite tensor", code=exitcodes.NONFINITE_LOSS,
                           detail=str(exc))
            raise NonFiniteError(f"step {self.state.step}: {exc}; the last saved state "
                                 f"(step {self.last_saved_step}) is intact") from None
        except StorageError:
            self.supervisor.phase("disk full")
            raise
        warning = self.supervisor.saved(path.name, tree_bytes(path))
        if warning:
            self.log.warning(warning)

    def save(self, reason: str) -> None:
        rank_states = ranks.rank_states_for_saving(self.world.gather_rank_states(self.stream))
        if not self.world.is_main:
            self.last_saved_step = self.state.step
            return
        with self.supervisor.long_operation("checkpoint"), self.saving(self.files.state):
            save_resume(self.config.run_dir, model=self.trainer.model, optimizer=self.trainer.optimizer,
                        gpt_config=self.trainer.gpt_config, tokenizer=self.tokenizer, run_state=self.state,
                        stream_state=self.stream.state_dict(), meta=self.meta(**self.trainer.adapter_meta()),
                        ranks=rank_states)
        self.last_saved_step = self.state.step
        self.log.info(f"saved resume state at step {self.state.step} ({reason})")
        self.log.event("checkpoint", step=self.state.step, reason=reason)

    def save_weights(self, path, meta: dict) -> None:
        """best/ or final/: weights any checkpoint reader loads (a LoRA run's merged, its adapter beside)."""
        weights, extra, meta_extra = self.trainer.saved_view()
        save_checkpoint(path, model_state=weights, model_config=self.trainer.gpt_config,
                        tokenizer=self.tokenizer, meta={**meta, **meta_extra}, extra_tensors=extra)

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
        with self.saving(self.files.final):
            self.save_weights(self.files.final, meta)
        self.log.info(f"final checkpoint: {self.files.final}")

    def finish(self, code: int, abort_reason: str | None = None) -> int:
        verdict = judge.verdict(self.state.history, abort_reason, self.config, self.env_file)
        if not self.world.is_main:
            return code
        try:
            write_json_atomic(self.files.verdict_file, verdict.to_json())  # never a half-written verdict
        except OSError as exc:
            if is_storage_error(exc):
                raise storage_error(self.files.verdict_file, exc, "verdict") from None
            raise
        self.log.info(verdict.line or f"VERDICT {verdict.outcome}: {verdict.reason}")
        self.log.event("verdict", step=self.state.step, **verdict.to_json())
        self.supervisor.phase("aborted" if abort_reason else "done")
        return code
