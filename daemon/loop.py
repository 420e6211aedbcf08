"""The training loop of a tatu run, top to bottom.

    config -> data manifest + tokenizer check -> seed checkpoint (or a fresh trunk)
    -> resume state if the run dir has one, else the step-0 baseline eval
    -> READY -> steps of SFT_GE + REPLAY_N micro-batches with a token-weighted loss
    -> every EVAL_EVERY steps: eval, drift, best, abort -> every TATU_CKPT_EVERY: resume state
    -> at MIX_STEPS_LIMIT: final checkpoint and verdict.

Exit codes are the design's contract (tatu.exitcodes).
"""
from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from contextlib import nullcontext

import torch

from tatu import exitcodes
from tatu.daemon import evaluation, memory
from tatu.daemon.config import RunConfig, describe
from tatu.daemon.control import ControlServer, socket_path
from tatu.daemon.logs import RunLog
from tatu.daemon.notify import Notifier
from tatu.daemon.state import has_resume, load_resume, restore_optimizer, restore_rng, save_resume
from tatu.daemon.verdict import judge
from tatu.data.stream import MixedStream
from tatu.exitcodes import TatuExit
from tatu.formats import fmt_pct
from tatu.model.checkpoint import CheckpointError, load_checkpoint, load_model_state, save_checkpoint
from tatu.model.device import DeviceError, resolve_device
from tatu.model.gpt import GPT, GPTConfig

EVAL_WATCHDOG_S = 3600  # an eval or a save may take long; the watchdog must not fire meanwhile
LOAD_TIMEOUT_S = 900


def lr_at(step: int, config: RunConfig) -> float:
    """Linear warmup, then constant or cosine down to TATU_MIN_LR at MIX_STEPS_LIMIT."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return config.lr
    span = max(1, config.mix_steps_limit - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1 + math.cos(math.pi * progress))


class Controls:
    """Requests from signals and the control socket, acted on at the next step boundary."""

    def __init__(self):
        self.stop = threading.Event()
        self.checkpoint = threading.Event()
        self.eval = threading.Event()
        self.status: dict = {"phase": "loading"}


def read_manifest(config: RunConfig) -> dict:
    path = config.data / "manifest.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TatuExit(exitcodes.BAD_DATA, f"{path}: no data manifest (TATU_DATA={config.data}; run `tatu data build`)")
    except (OSError, json.JSONDecodeError) as exc:
        raise TatuExit(exitcodes.BAD_DATA, f"{path}: unreadable data manifest ({exc})")


def load_start(config: RunConfig, manifest: dict):
    """(model config, initial weights or None, tokenizer, seed meta) from the seed or from scratch."""
    from tatu.model.tokenizer import load_tokenizer

    if config.seed_ckpt is not None:
        try:
            seed = load_checkpoint(config.seed_ckpt)
        except CheckpointError as exc:
            raise TatuExit(exitcodes.BAD_DATA, str(exc))
        model_config = GPTConfig(**{**seed.model_config.to_dict(), "dropout": config.dropout, "attn": "sdpa"})
        return model_config, seed.model_state, seed.tokenizer, seed.meta
    tokenizer = load_tokenizer(config.data / manifest.get("tokenizer", "tokenizer.json"))
    model_config = GPTConfig(
        vocab_size=tokenizer.vocab_size, block_size=config.block_size, n_layer=config.n_layer,
        n_head=config.n_head, n_embd=config.n_embd, dropout=config.dropout,
    )
    return model_config, None, tokenizer, {}


def run(config: RunConfig, sources: dict[str, str], log: RunLog | None = None) -> int:
    run_dir = config.run_dir
    log = log or RunLog(None)
    notifier = Notifier()
    controls = Controls()
    notifier.extend_timeout(LOAD_TIMEOUT_S)

    log.info(f"tatu run {config.run} ({config.mode}) -> {run_dir}  config {config.hash}")
    for line in describe(config, sources):
        log.info(line)

    # --- data, tokenizer, model -------------------------------------------------------
    manifest = read_manifest(config)
    resume = None
    if has_resume(run_dir):  # the state holds the weights: the seed is not read again
        try:
            resume = load_resume(run_dir, "cpu")
        except CheckpointError as exc:
            raise TatuExit(exitcodes.BAD_DATA, f"resume state: {exc}")
        check_same_config(resume.meta.get("config", {}), config)
        model_config, initial_state, tokenizer = resume.model_config, resume.model_state, resume.tokenizer
        seed_meta = {"step": resume.meta.get("seed_meta_step")}
    else:
        model_config, initial_state, tokenizer, seed_meta = load_start(config, manifest)
    if manifest.get("tokenizer_hash") != tokenizer.hash:
        raise TatuExit(
            exitcodes.BAD_CONFIG,
            f"tokenizer mismatch: data {config.data} was built with {str(manifest.get('tokenizer_hash'))[:12]}, "
            f"checkpoint {config.seed_ckpt} uses {tokenizer.hash[:12]}",
        )
    if config.seq_len > model_config.block_size:
        raise TatuExit(exitcodes.BAD_CONFIG, f"TATU_SEQ_LEN={config.seq_len} exceeds the model's block_size {model_config.block_size}")
    try:
        device = resolve_device(config.device)
    except DeviceError as exc:
        raise TatuExit(exitcodes.BAD_CONFIG, f"TATU_DEVICE={exc}")
    # The socket first: a second daemon for the same run stops here, before touching its files.
    state: dict = {"step": 0, "baseline": None, "best": None, "history": [], "trunk_reference": None,
                   "aborted": None, "eval_files": None}
    def status_reply(_request):
        return {**controls.status, "run": config.run, "pid": os.getpid(), "config_hash": config.hash,
                "oom_score_adj": memory.oom_score_adj(), "memory": memory.sample()}

    handlers = {
        "status": status_reply,
        "config": lambda _r: {"config": config.to_json(), "sources": sources},
        "evals": lambda _r: {"evals": [{k: v for k, v in h.items() if k != "generations"} for h in state["history"]]},
        "checkpoint": lambda _r: (controls.checkpoint.set(), {"queued": "checkpoint at the next step boundary"})[1],
        "eval": lambda _r: (controls.eval.set(), {"queued": "eval at the next step boundary"})[1],
        "stop": lambda _r: (controls.stop.set(), {"queued": "graceful stop at the next step boundary"})[1],
    }
    try:
        server = ControlServer(socket_path(config.run), handlers).start()
    except RuntimeError as exc:  # a second daemon for the same run name: not a crash to restart
        raise TatuExit(exitcodes.BAD_CONFIG, f"TATU_RUN={config.run}: {exc}")
    try:
        log.attach(run_dir)
        try:
            stream = MixedStream(config.data, mix=config.mix, micro_batch=config.micro_batch, seq_len=config.seq_len,
                                 seed=config.seed, tokenizer_hash=tokenizer.hash)
            suite = evaluation.load_suite(config, manifest, tokenizer, log)
        except (ValueError, KeyError, OSError) as exc:
            raise TatuExit(exitcodes.BAD_DATA, str(exc))

        torch.manual_seed(config.seed)
        model = GPT(model_config)
        if initial_state is not None:
            try:
                load_model_state(model, initial_state, str(resume.path if resume else config.seed_ckpt))
            except CheckpointError as exc:
                raise TatuExit(exitcodes.BAD_DATA, str(exc))
        model.to(device)
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=config.lr, betas=(config.beta1, config.beta2),
        )
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
        log.info(f"model {model.num_params() / 1e6:.2f}M params on {device}; mix {config.mix} x {config.micro_batch} x {config.seq_len}")

        # --- the run's state: resumed, or a new baseline -------------------------------------
        meta_base = {"config": config.to_json(), "mode": config.mode, "run": config.run, "seed_meta_step": seed_meta.get("step")}
        if resume is not None:
            saved = resume.extra_json["resume"]
            check_same_eval_files(saved, suite)
            restore_optimizer(optimizer, resume.extra_tensors["optimizer"], saved["optimizer_groups"])
            stream.load_state_dict(saved["stream"])
            restore_rng(saved["rng"], resume.extra_tensors["rng"])
            state = {k: saved.get(k) for k in state}
            log.info(f"resumed from step {state['step']}")
            log.event("resumed", step=state["step"])
        else:
            # An explicit TATU_TRUNK_CKPT wins over the reference the seed carries.
            state["trunk_reference"] = trunk_reference_from(config, suite, device, log, tokenizer) or seed_meta.get("trunk_reference")
            state["eval_files"] = suite.file_hashes
        if state["trunk_reference"] is None:
            log.info("drift_tronco: n/a (the seed carries no trunk reference and TATU_TRUNK_CKPT is not set)")

    except BaseException:
        server.close()
        raise
    def on_sigterm(*_):
        # Say so at once, and ask for the time the final save needs, even mid-eval.
        controls.stop.set()
        notifier.stopping()
        notifier.extend_timeout(EVAL_WATCHDOG_S)

    previous_sigterm = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return _train(config, log, notifier, controls, run_dir, model, model_config, tokenizer, optimizer,
                      autocast, stream, suite, device, state, meta_base)
    finally:
        signal.signal(signal.SIGTERM, previous_sigterm)
        server.close()


# What may change when a run is restarted: when and how often things happen, not what is
# measured or how it is trained (a changed limit or LR would make the verdict meaningless).
RESUMABLE_CHANGES = frozenset({"MIX_STEPS_LIMIT", "TATU_CKPT_EVERY", "TATU_MEM_FLOOR_MB", "TATU_DEVICE",
                               "EVAL_EVERY", "TATU_GEN_PROMPTS", "TATU_GEN_TOKENS", "TATU_FAULT_NAN_STEP"})


def check_same_config(saved_config: dict, config: RunConfig) -> None:
    """A run continues only with the configuration it started with (but for its schedule)."""
    current = config.to_json()
    changed = sorted(k for k in set(saved_config) | set(current)
                     if saved_config.get(k) != current.get(k) and k not in RESUMABLE_CHANGES)
    if changed:
        shown = ", ".join(f"{k}: {saved_config.get(k)!r} -> {current.get(k)!r}" for k in changed[:4])
        raise TatuExit(exitcodes.BAD_CONFIG, f"run {config.run} was started with another configuration ({shown}); "
                                             f"restore it, or start a new TATU_RUN")


def check_same_eval_files(saved_state: dict, suite) -> None:
    """...and with the eval files its baseline was measured on."""
    saved_files = saved_state.get("eval_files") or {}
    moved = sorted(name for name, sha in saved_files.items() if suite.file_hashes.get(name) != sha)
    if moved:
        raise TatuExit(exitcodes.BAD_DATA, f"eval sets {moved} differ from those this run's baseline was measured on")


def trunk_reference_from(config: RunConfig, suite, device, log, tokenizer):
    if config.trunk_ckpt is None:
        return None
    try:
        trunk = load_checkpoint(config.trunk_ckpt)
    except CheckpointError as exc:
        raise TatuExit(exitcodes.BAD_DATA, f"TATU_TRUNK_CKPT: {exc}")
    if trunk.tokenizer.hash != tokenizer.hash:
        raise TatuExit(exitcodes.BAD_CONFIG, f"TATU_TRUNK_CKPT {config.trunk_ckpt} uses tokenizer {trunk.tokenizer.hash[:12]}, "
                                             f"the run uses {tokenizer.hash[:12]}: drift_tronco would compare different tokens")
    log.info(f"scoring the trunk {config.trunk_ckpt} for drift_tronco")
    trunk_model = trunk.build_model(device).eval()
    results = evaluation.score_suite(trunk_model, suite, device, config, only=evaluation.REFERENCE_SETS)
    return evaluation.trunk_reference(results, suite)


def _train(config, log, notifier, controls, run_dir, model, model_config, tokenizer, optimizer,
           autocast, stream, suite, device, state, meta_base) -> int:
    limit = config.mix_steps_limit
    last_saved_step = state["step"]
    latest_results: dict = {}  # the last eval's per-line scores (a trunk stores them)

    def meta(**extra):
        return {**meta_base, "step": state["step"], "trunk_reference": state["trunk_reference"], **extra}

    def save_state(reason: str):
        nonlocal last_saved_step
        controls.status["phase"] = "checkpoint"
        notifier.set_watchdog_timeout(EVAL_WATCHDOG_S)
        if controls.stop.is_set():
            notifier.extend_timeout(EVAL_WATCHDOG_S)
        run_state = {**state, "stream": stream.state_dict()}
        save_resume(run_dir, model=model, optimizer=optimizer, model_config=model_config, tokenizer=tokenizer,
                    run_state=run_state, meta=meta())
        notifier.restore_watchdog_timeout()
        last_saved_step = state["step"]
        log.info(f"saved resume state at step {state['step']} ({reason})")
        log.event("checkpoint", step=state["step"], reason=reason)

    def finish(code: int, abort_reason: str | None = None) -> int:
        verdict = judge(state["history"], abort_reason, config)
        tmp = run_dir / ".verdict.json.tmp"
        tmp.write_text(json.dumps(verdict, indent=1, allow_nan=False) + "\n")
        os.replace(tmp, run_dir / "verdict.json")  # never a half-written verdict
        log.info(verdict["line"])
        log.event("verdict", step=state["step"], **verdict)
        controls.status["phase"] = "aborted" if abort_reason else "done"
        return code

    def publish(record: dict) -> None:
        """What `tatu status` shows of the last eval."""
        drift_tronco = (record["drift_tronco"] or {}).get("value")
        controls.status.update(
            last_eval={"step": record["step"], "sets": record["sets"], "drift": record["drift"]["value"],
                       "drift_lo": record["drift"]["lo"], "drift_hi": record["drift"]["hi"], "drift_p": record["drift"]["p_value"],
                       "drift_tronco": drift_tronco, "trunk_ok": record["trunk_ok"], "best": record["best"]},
            best={"step": state["best"]["step"], state["best"]["set"]: state["best"]["ppl"]})

    def run_eval() -> evaluation.Decision:
        controls.status["phase"] = "eval"
        notifier.set_watchdog_timeout(EVAL_WATCHDOG_S)
        notifier.extend_timeout(EVAL_WATCHDOG_S)
        start = time.perf_counter()
        model.eval()
        results = evaluation.score_suite(model, suite, device, config)
        samples = evaluation.generate_samples(model, suite, tokenizer, device, config)
        model.train()
        latest_results.update(results)
        if state["baseline"] is None:
            state["baseline"] = results
        decision = evaluation.decide(state["step"], results, state, suite, config, time.perf_counter() - start, samples)
        notifier.restore_watchdog_timeout()
        state["history"].append(decision.record)
        if decision.best:
            key = decision.record["best_set"]
            state["best"] = {"step": state["step"], "set": key, "ppl": results[key]["ppl"]}
            save_checkpoint(run_dir / "best", model=model, model_config=model_config, tokenizer=tokenizer,
                            meta=meta(best=state["best"]))
        log.info(decision.line)
        for warning in decision.record["warnings"]:
            log.warning(warning)
        log.event("eval", **decision.record)
        publish(decision.record)
        return decision

    if state["history"]:
        publish(state["history"][-1])
    controls.status.update(step=state["step"], limit=limit)
    if state["aborted"]:  # an abort is final (seed 000): never train on past it
        log.error(f"run {config.run} was aborted at step {state['aborted']['step']}: {state['aborted']['reason']}; "
                  f"start a new TATU_RUN")
        return state["aborted"]["code"]
    if state["step"] >= limit and (run_dir / "verdict.json").exists():
        # Type=notify: exiting before READY would count as a failed start (and be restarted).
        notifier.ready()
        notifier.status(f"finished at step {state['step']}; nothing to do")
        log.info(f"run {config.run} already finished at step {state['step']}; nothing to do")
        return exitcodes.OK

    # --- step 0: the run's own baseline, never recomputed after a restart ----------------
    if state["baseline"] is None:
        controls.status["phase"] = "baseline"
        log.info("baseline eval at step 0")
        run_eval()
        save_state("baseline")
    notifier.ready()
    log.event("ready", step=state["step"], limit=limit)

    model.train()
    best_key = evaluation.best_set(config.mode)
    step_seconds, tokens_per_s = None, 0.0
    mem, mem_sampled_at = memory.sample(), time.monotonic()
    while state["step"] < limit:
        if controls.stop.is_set():
            notifier.stopping()
            notifier.extend_timeout(EVAL_WATCHDOG_S)
            log.info(f"stop requested at step {state['step']}: saving the resume state")
            save_state("stop")
            controls.status["phase"] = "stopped"
            return exitcodes.OK
        controls.status["phase"] = "training"
        started = time.perf_counter()
        batch = stream.next_step()
        step = state["step"] + 1
        lr = lr_at(step - 1, config)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # Token-weighted over the whole step: sum of token losses / all target tokens, so
        # "43% of tokens are English" also means 43% of the gradient.
        total_targets = sum(batch.target_tokens.values())
        optimizer.zero_grad(set_to_none=True)
        # Accumulated on the device: one host sync per step, not one per micro-batch.
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for micro in batch.micro_batches:
            x = torch.from_numpy(micro.x).to(device, non_blocking=True)
            y = torch.from_numpy(micro.y).to(device, non_blocking=True)
            with autocast:
                _, nll = model(x, y)
            micro_loss = nll.sum()
            if config.fault_nan_step == step:
                micro_loss = micro_loss * float("nan")
            (micro_loss / max(total_targets, 1)).backward()
            loss_sum += micro_loss.detach().double()
        loss = loss_sum.item() / max(total_targets, 1)
        if not math.isfinite(loss):
            log.error(f"non-finite loss {loss} at step {step}: stopping; the last saved state (step {last_saved_step}) is intact")
            log.event("abort", step=step, reason="non-finite loss", loss=str(loss))
            controls.status["phase"] = "aborted"
            return exitcodes.NONFINITE_LOSS
        if total_targets == 0:
            log.warning(f"step {step}: no target tokens in any micro-batch; optimizer step skipped")
        else:
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
        state["step"] = step
        elapsed = time.perf_counter() - started
        step_seconds = elapsed if step_seconds is None else 0.9 * step_seconds + 0.1 * elapsed
        tokens_per_s = sum(m.x.size for m in batch.micro_batches) / max(elapsed, 1e-9)
        # RSS every step (~12 us); the host's available memory and swap (~85 us) at most once a second.
        if time.monotonic() - mem_sampled_at >= 1.0:
            mem, mem_sampled_at = memory.sample(), time.monotonic()
        else:
            mem = {**mem, "rss_mb": memory.rss_mb()}
        eta_s = (limit - step) * step_seconds
        controls.status.update(step=step, limit=limit, loss=loss, lr=lr, tokens_per_s=round(tokens_per_s, 1),
                               eta_s=round(eta_s, 1), replay_fraction=batch.replay_fraction, memory=mem)
        # `step 37/200 sftHeld 9.07 drift +1.2% 1830 tok/s ETA 12m`
        last = state["history"][-1] if state["history"] else None
        last_eval = f"{best_key} {last['sets'][best_key]['ppl']:.2f} drift {fmt_pct(last['drift']['value'])} " if last else ""
        notifier.status(f"step {step}/{limit} {last_eval}{tokens_per_s:.0f} tok/s ETA {eta_s / 60:.0f}m")
        notifier.progress()
        log.event("step", step=step, loss=loss, lr=lr, tokens=batch.target_tokens,
                  replay_fraction=batch.replay_fraction, seconds=round(elapsed, 4), memory=mem)

        if step % config.eval_every == 0 or step == limit or controls.eval.is_set():
            controls.eval.clear()
            decision = run_eval()
            if decision.abort_reason:
                log.error(f"ABORT at step {step}: {decision.abort_reason}")
                log.event("abort", step=step, reason=decision.abort_reason)
                state["aborted"] = {"step": step, "reason": decision.abort_reason, "code": exitcodes.FORGET_ABORT}
                save_state("forget abort")
                return finish(exitcodes.FORGET_ABORT, decision.abort_reason)
        low_memory = config.mem_floor_mb and mem["available_mb"] < config.mem_floor_mb and step - last_saved_step >= config.eval_every
        if low_memory:
            log.warning(f"available memory {mem['available_mb']:.0f} MB < TATU_MEM_FLOOR_MB {config.mem_floor_mb}: saving early")
        if step % config.ckpt_every == 0 or controls.checkpoint.is_set() or low_memory or step == limit:
            controls.checkpoint.clear()
            save_state("low memory" if low_memory else "scheduled")

    # --- the end: final checkpoint (a trunk stores its reference metrics) and verdict -------
    final_meta = meta()
    if config.mode == "pretrain":  # the step == limit eval ran just before: its scores are the trunk's
        if not latest_results:  # resumed after that eval: score the final weights again
            model.eval()
            latest_results.update(evaluation.score_suite(model, suite, device, config))
        final_meta["trunk_reference"] = evaluation.trunk_reference(latest_results, suite)
    save_checkpoint(run_dir / "final", model=model, model_config=model_config, tokenizer=tokenizer, meta=final_meta)
    log.info(f"final checkpoint: {run_dir / 'final'}")
    return finish(exitcodes.OK)

