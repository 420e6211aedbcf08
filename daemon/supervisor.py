"""The Supervisor: what systemd and the operator see of a run, and what they ask of it.

- systemd: READY, STATUS text, the watchdog fed after each finished step, timeout extensions
  around the long operations (load, eval, save) - daemon/notify.py speaks the protocol.
- the control socket (daemon/control.py): status, config, evals, and three requests - stop,
  eval, checkpoint - that the loop acts on at the next step boundary.
- SIGTERM and SIGINT (daemon/signals.py, installed before torch loads): a graceful stop at the
  next step boundary (the resume state is saved first).
- memory: RSS every step, the host's available memory and swap at most once a second.
- disk: the free space of the run directory against the last save's size, in the status
  reply (`disk_free_mb`, `last_save_mb`) and as a warning while a save still fits.

A new control command: a small method here, and one line in `handlers()`.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from tatu.daemon import memory, signals
from tatu.daemon.config import ConfigError, RunConfig
from tatu.daemon.control import ControlServer, socket_path
from tatu.daemon.notify import Notifier
from tatu.daemon.suite import best_set
from tatu.formats import fmt_pct
from tatu.storage import free_bytes

EVAL_WATCHDOG_S = 3600  # an eval or a save may take long; the watchdog must not fire meanwhile
LOAD_TIMEOUT_S = 900
MEMORY_SAMPLE_S = 1.0  # the host's available memory and swap (~85 us) at most this often; RSS (~12 us) every step
# Warn while there is still room: the next saves of state/, best/ and final/ each need their size again.
DISK_WARN_SAVES = 3


class Supervisor:
    def __init__(self, config: RunConfig, origins: dict[str, str]):
        self.config = config
        self.origins = origins
        self.notifier = Notifier()
        self.state = None  # the RunState, once there is one (the evals command reads its history)
        self.status: dict = {"phase": "loading"}
        self._stop = threading.Event()
        self._eval = threading.Event()
        self._checkpoint = threading.Event()
        self._server = ControlServer(socket_path(config.run), self.handlers())
        self._step_seconds: float | None = None
        self.memory = memory.sample()
        self._memory_sampled_at = time.monotonic()
        self._last_eval: dict | None = None
        self._save_bytes: dict[str, int] = {}  # checkpoint name -> bytes of its last save
        self._disk_warned = False
        self.notifier.extend_timeout(LOAD_TIMEOUT_S)
        signals.on_stop(self._on_stop_signal)

    # --- the control socket ------------------------------------------------------------
    def handlers(self) -> dict:
        return {"status": self.reply_status, "config": self.reply_config, "evals": self.reply_evals,
                "checkpoint": self.request_checkpoint, "eval": self.request_eval, "stop": self.request_stop}

    def reply_status(self, _request: dict) -> dict:
        return {**self.status, "run": self.config.run, "pid": os.getpid(), "config_hash": self.config.hash,
                "oom_score_adj": memory.oom_score_adj(), "memory": memory.sample(), **self.disk()}

    def reply_config(self, _request: dict) -> dict:
        return {"config": self.config.to_json(), "origins": self.origins}  # where each setting came from

    def reply_evals(self, _request: dict) -> dict:
        history = self.state.history if self.state is not None else []
        return {"evals": [{k: v for k, v in h.items() if k != "generations"} for h in history]}

    def request_checkpoint(self, _request: dict) -> dict:
        self._checkpoint.set()
        return {"queued": "checkpoint at the next step boundary"}

    def request_eval(self, _request: dict) -> dict:
        self._eval.set()
        return {"queued": "eval at the next step boundary"}

    def request_stop(self, _request: dict) -> dict:
        self._stop.set()
        return {"queued": "graceful stop at the next step boundary"}

    def __enter__(self) -> "Supervisor":
        # A second daemon for the same run stops here, before touching its files.
        try:
            self._server.start()
        except RuntimeError as exc:  # not a crash to restart: the name is taken
            raise ConfigError(f"TATU_RUN={self.config.run}: {exc}") from None
        return self

    def __exit__(self, *exc) -> None:
        self._server.close()

    # --- signals and requests ------------------------------------------------------------
    def _on_stop_signal(self) -> None:
        # Say so at once, and ask for the time the final save needs, even mid-eval.
        self._stop.set()
        self.notifier.stopping()
        self.notifier.extend_timeout(EVAL_WATCHDOG_S)

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set() or signals.stop_requested()

    @property
    def eval_requested(self) -> bool:
        return self._eval.is_set()

    @property
    def checkpoint_requested(self) -> bool:
        return self._checkpoint.is_set()

    def clear_eval_request(self) -> None:
        self._eval.clear()

    def clear_checkpoint_request(self) -> None:
        self._checkpoint.clear()

    # --- phases ----------------------------------------------------------------------------
    def phase(self, name: str) -> None:
        self.status["phase"] = name

    @contextmanager
    def long_operation(self, phase: str):
        """An eval or a save: the watchdog (and, while stopping, the stop timeout) gets room."""
        self.phase(phase)
        self.notifier.set_watchdog_timeout(EVAL_WATCHDOG_S)
        if phase == "eval" or self.stop_requested:
            self.notifier.extend_timeout(EVAL_WATCHDOG_S)
        yield
        self.notifier.restore_watchdog_timeout()

    def stopping(self) -> None:
        self.notifier.stopping()
        self.notifier.extend_timeout(EVAL_WATCHDOG_S)

    def begin(self, step: int) -> None:
        self.status.update(step=step, limit=self.config.mix_steps_limit)

    def ready(self) -> None:
        self.notifier.ready()
        # Until the first step ends (a step can take minutes on a big model) STATUS says so.
        self.notifier.status(f"step {self.status['step']}/{self.config.mix_steps_limit} {self._eval_text()}first step running")

    def eval_progress(self, step: int, done: int, total: int) -> None:
        """STATUS during an eval: `baseline eval 2/3 sets`, `step 40/200 eval 1/3 sets`."""
        where = "baseline" if step == 0 and self._last_eval is None else f"step {step}/{self.config.mix_steps_limit}"
        self.notifier.status(f"{where} eval {done + 1}/{total} sets")

    # --- disk ------------------------------------------------------------------------------
    def disk(self) -> dict:
        free = free_bytes(self.config.run_dir)
        last = max(self._save_bytes.values(), default=None)
        return {"disk_free_mb": round(free / 1e6, 1), "last_save_mb": None if last is None else round(last / 1e6, 3),
                "disk_low": last is not None and free < DISK_WARN_SAVES * last}

    def saved(self, name: str, n_bytes: int) -> str | None:
        """A save of `name` took `n_bytes`: the warning to log, once, when the disk runs short."""
        self._save_bytes = {**self._save_bytes, name: n_bytes}  # replaced whole: the socket thread reads it
        disk = self.disk()
        self.status["disk"] = disk
        if not disk["disk_low"]:
            self._disk_warned = False
            return None
        if self._disk_warned:
            return None
        self._disk_warned = True
        return (f"disk: {disk['disk_free_mb']:.1f} MB free under {self.config.run_dir}, the last save took "
                f"{disk['last_save_mb']:.1f} MB: fewer than {DISK_WARN_SAVES} more saves fit (a full disk stops the run, exit 74)")

    def finished_already(self, step: int) -> None:
        # Type=notify: exiting before READY would count as a failed start (and be restarted).
        self.notifier.ready()
        self.notifier.status(f"finished at step {step}; nothing to do")

    def publish_eval(self, record: dict, best: dict) -> None:
        """What `tatu status` shows of the last eval."""
        self._last_eval = record
        drift_tronco = (record["drift_tronco"] or {}).get("value")
        self.status.update(
            last_eval={"step": record["step"], "sets": record["sets"], "drift": record["drift"]["value"],
                       "drift_lo": record["drift"]["lo"], "drift_hi": record["drift"]["hi"], "drift_p": record["drift"]["p_value"],
                       "drift_tronco": drift_tronco, "trunk_ok": record["trunk_ok"], "best": record["best"],
                       "changes": record["changes"]},
            best={"step": best["step"], best["set"]: best["ppl"]})

    # --- every step ------------------------------------------------------------------------
    def tick(self, stats) -> dict:
        """A step finished: status, STATUS text, the watchdog. Returns the memory sample."""
        limit = self.config.mix_steps_limit
        elapsed = stats.seconds
        self._step_seconds = elapsed if self._step_seconds is None else 0.9 * self._step_seconds + 0.1 * elapsed
        tokens_per_s = stats.input_tokens / max(elapsed, 1e-9)
        if time.monotonic() - self._memory_sampled_at >= MEMORY_SAMPLE_S:
            self.memory, self._memory_sampled_at = memory.sample(), time.monotonic()
        else:
            self.memory = {**self.memory, "rss_mb": memory.rss_mb()}
        eta_s = (limit - stats.step) * self._step_seconds
        self.status.update(step=stats.step, limit=limit, loss=stats.loss, lr=stats.lr,
                           tokens_per_s=round(tokens_per_s, 1), eta_s=round(eta_s, 1),
                           replay_fraction=stats.replay_fraction, memory=self.memory)
        # `step 37/200 sftHeld 9.07 drift +1.2% 1830 tok/s ETA 12m`
        disk = " DISK LOW" if self.status.get("disk", {}).get("disk_low") else ""
        self.notifier.status(f"step {stats.step}/{limit} {self._eval_text()}{tokens_per_s:.0f} tok/s ETA {eta_s / 60:.0f}m{disk}")
        self.notifier.progress()
        return self.memory

    def _eval_text(self) -> str:
        key, last = best_set(self.config.mode), self._last_eval
        return f"{key} {last['sets'][key]['ppl']:.2f} drift {fmt_pct(last['drift']['value'])} " if last else ""

    @property
    def memory_low(self) -> bool:
        floor = self.config.mem_floor_mb
        return bool(floor) and self.memory["available_mb"] < floor
