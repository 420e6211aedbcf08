"""The Supervisor: what systemd and the operator see of a run, and what they ask of it.

- systemd: READY, STATUS text, the watchdog fed after each finished step, timeout extensions
  around the long operations (load, eval, save) - daemon/notify.py speaks the protocol.
- the control socket (daemon/control/server.py): status, config, evals, and three requests - stop,
  eval, checkpoint - that the loop acts on at the next step boundary.
- SIGTERM and SIGINT (daemon/signals.py, installed before torch loads): a graceful stop at the
  next step boundary (the resume state is saved first).
- memory: RSS every step, the host's available memory and swap at most once a second.
- disk: the free space of the run directory against the last save's size, in the status
  reply (`disk_free_mb`, `last_save_mb`) and as a warning while a save still fits.

The status reply costs the loop nothing: the loop publishes a `StatusSnapshot` (a new immutable
record, assigned whole) whenever what it shows changes, and the control thread answers from the
latest one plus a `HostSample` it takes itself at most once per MEMORY_SAMPLE_S. No lock is
shared, so no reply ever holds up a step.

A new control command: a small method here and one line in `handlers()`; a request the loop
acts on is also a field of `Requests` and its source in `local_requests()` (ranks agree on every
field without further code).
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Callable

from tatu.daemon import memory, signals
from tatu.daemon.config import ConfigError, RunConfig
from tatu.daemon.control.access import SocketTaken
from tatu.daemon.control.server import ControlServer, socket_path
from tatu.daemon.notify import Notifier
from tatu.daemon.status_snapshot import DISK_WARN_SAVES, HostSample, StatusSnapshot, disk_fields
from tatu.daemon.run.lock import RunDirBusy
from tatu.daemon.run.records import Best, EvalRecord
from tatu.daemon.suite import best_set
from tatu.formats import fmt_pct
from tatu.storage import free_bytes

# An eval, a save, or the final save after a stop may take long: the watchdog and the start/stop
# timeout get this much room meanwhile.
LONG_OPERATION_S = 3600
LOAD_TIMEOUT_S = 900
MEMORY_SAMPLE_S = 1.0  # the host's available memory and swap (~85 us) at most this often; RSS (~12 us) every step


@dataclass(frozen=True)
class Requests:
    """What the loop acts on at a step boundary: the one list of them. Every field is a flag;
    under torchrun `Supervisor.agree` reduces them all at once (any rank's request counts), so
    every rank stops, evaluates and saves at the same step."""
    stop: bool = False
    eval: bool = False
    checkpoint: bool = False
    memory_low: bool = False


ONE_SHOT = ("eval", "checkpoint")  # served once; stop and low memory hold until the run ends


class Supervisor:
    def __init__(self, config: RunConfig, origins: dict[str, str]):
        self.config = config
        self.origins = origins
        self.notifier = Notifier()
        self.state = None  # the RunState, once there is one (the evals command reads its history)
        self.status: dict = {"phase": "loading"}  # the loop's working copy; replies read `_snapshot`
        self._asked = {name: threading.Event() for name in ("stop", *ONE_SHOT)}  # set by the socket thread
        self._agreed: Requests | None = None  # under torchrun: the boundary's snapshot, the only one read
        self._server = ControlServer(socket_path(config.run), self.handlers())
        self._step_seconds: float | None = None
        self.memory = memory.sample()
        self._memory_sampled_at = time.monotonic()
        self._last_eval: EvalRecord | None = None
        self._save_bytes: dict[str, int] = {}  # checkpoint name -> bytes of its last save
        self._disk_warned = False
        self._snapshot = StatusSnapshot.of(self.status, self._save_bytes)
        self._host: HostSample | None = None  # the control thread's alone
        self.notifier.extend_timeout(LOAD_TIMEOUT_S)
        signals.on_stop(self._on_stop_signal)

    # --- the control socket ------------------------------------------------------------
    def handlers(self) -> dict:
        return {"status": self.reply_status, "config": self.reply_config, "evals": self.reply_evals,
                "checkpoint": self.request_checkpoint, "eval": self.request_eval, "stop": self.request_stop}

    def reply_status(self, _request: dict) -> dict:
        snapshot, host = self._snapshot, self._host_sample()
        return {**snapshot.progress, "run": self.config.run, "pid": os.getpid(), "config_hash": self.config.hash,
                "oom_score_adj": host.oom_score_adj, "memory": dict(host.memory),
                **disk_fields(host.free_bytes, snapshot.save_bytes)}

    def _host_sample(self) -> HostSample:
        host, now = self._host, time.monotonic()
        if host is None or now - host.taken_at >= MEMORY_SAMPLE_S:
            host = self._host = HostSample.take(now, self.config.run_dir)
        return host

    def reply_config(self, _request: dict) -> dict:
        return {"config": self.config.to_json(), "origins": self.origins}  # where each setting came from

    def reply_evals(self, _request: dict) -> dict:
        history = self.state.history if self.state is not None else []
        return {"evals": [{k: v for k, v in h.to_json().items() if k != "generations"} for h in history]}

    def request_checkpoint(self, _request: dict) -> dict:
        self._asked["checkpoint"].set()
        return {"queued": "checkpoint at the next step boundary"}

    def request_eval(self, _request: dict) -> dict:
        self._asked["eval"].set()
        return {"queued": "eval at the next step boundary"}

    def request_stop(self, _request: dict) -> dict:
        self._asked["stop"].set()
        return {"queued": "graceful stop at the next step boundary"}

    def __enter__(self) -> "Supervisor":
        # A second daemon for the same run stops here, before touching its files: the run is already
        # running (75, as when its run dir's lock stops it: which of the two it meets first is a race).
        try:
            self._server.start()
        except SocketTaken as exc:
            raise RunDirBusy(f"TATU_RUN={self.config.run}: {exc}") from None
        except RuntimeError as exc:  # not a crash to restart: no socket can be made there (a path too long, a foreign dir)
            raise ConfigError(f"TATU_RUN={self.config.run}: {exc}") from None
        return self

    def __exit__(self, *exc) -> None:
        self._server.close()

    # --- signals and requests ------------------------------------------------------------
    def _on_stop_signal(self) -> None:
        # Say so at once, and ask for the time the final save needs, even mid-eval.
        self._asked["stop"].set()
        self.notifier.stopping()
        self.notifier.extend_timeout(LONG_OPERATION_S)

    def _stop_asked(self) -> bool:
        return self._asked["stop"].is_set() or signals.stop_requested()

    def local_requests(self) -> Requests:
        """This process's own requests, as they stand now."""
        return Requests(stop=self._stop_asked(), eval=self._asked["eval"].is_set(),
                        checkpoint=self._asked["checkpoint"].is_set(), memory_low=self.memory_low)

    @property
    def requests(self) -> Requests:
        """What the loop acts on: this process's requests, or under torchrun the snapshot every
        rank agreed on at the last step boundary."""
        return self._agreed if self._agreed is not None else self.local_requests()

    def served(self, name: str) -> None:
        """The loop acted on the one-shot request `name` (eval, checkpoint)."""
        if name not in ONE_SHOT:
            raise ValueError(f"{name!r} is not a one-shot request ({', '.join(ONE_SHOT)})")
        if self._agreed is not None:  # a request that came after the snapshot waits for the next boundary
            self._agreed = replace(self._agreed, **{name: False})
        else:
            self._asked[name].clear()

    def act_on_agreed_requests(self) -> None:
        """Under torchrun: from now on the loop reads only what `agree` settles at each step
        boundary (nothing before the first one, so every rank runs the baseline eval)."""
        self._agreed = Requests()

    def agree(self, any_rank: Callable[[list[bool]], list[bool]]) -> None:
        """A step boundary under torchrun: take this rank's requests (a one-shot one belongs to
        this boundary now; a later one waits for the next) and keep what `any_rank` (a MAX
        all-reduce, daemon/distributed.py) makes of every field, the same on every rank."""
        local = self.local_requests()
        for name in ONE_SHOT:
            self._asked[name].clear()
        names = [f.name for f in fields(Requests)]
        agreed = any_rank([getattr(local, name) for name in names])
        self._agreed = Requests(**{name: bool(flag) for name, flag in zip(names, agreed)})

    # --- phases ----------------------------------------------------------------------------
    def _publish(self) -> None:
        """After every change to `status`: what the next status reply shows."""
        self._snapshot = StatusSnapshot.of(self.status, self._save_bytes)

    def phase(self, name: str) -> None:
        if self.status.get("phase") != name:  # the loop says "training" every step
            self.status["phase"] = name
            self._publish()

    def describe_training(self, trainable: str) -> None:
        """What trains (`TATU_TRAIN`'s summary line), shown by `tatu status`."""
        self.status["trainable"] = trainable
        self._publish()

    def warn(self, line: str) -> None:
        """A warning `tatu status` shows from now on (the retention terms': a term that swamps the data)."""
        self.status["warning"] = line
        self._publish()

    @contextmanager
    def long_operation(self, phase: str):
        """An eval or a save: the watchdog (and, while stopping, the stop timeout) gets room."""
        self.phase(phase)
        self.notifier.set_watchdog_timeout(LONG_OPERATION_S)
        if phase == "eval" or self._stop_asked():
            self.notifier.extend_timeout(LONG_OPERATION_S)
        yield
        self.notifier.restore_watchdog_timeout()

    def stopping(self) -> None:
        self.notifier.stopping()
        self.notifier.extend_timeout(LONG_OPERATION_S)

    def begin(self, step: int) -> None:
        self.status.update(step=step, limit=self.config.mix_steps_limit)
        self._publish()

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
        return disk_fields(free_bytes(self.config.run_dir), self._save_bytes)

    def saved(self, name: str, n_bytes: int) -> str | None:
        """A save of `name` took `n_bytes`: the warning to log, once, when the disk runs short."""
        self._save_bytes = {**self._save_bytes, name: n_bytes}  # replaced whole: the socket thread reads it
        disk = self.disk()
        self.status["disk"] = disk
        self._publish()
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

    def publish_eval(self, record: EvalRecord, best: Best) -> None:
        """What `tatu status` shows of the last eval."""
        self._last_eval = record
        drift_tronco = record.drift_tronco.value if record.drift_tronco else None
        self.status.update(
            last_eval={"step": record.step, "sets": {name: s.to_json() for name, s in record.sets.items()},
                       "drift": record.drift.value, "drift_lo": record.drift.lo, "drift_hi": record.drift.hi,
                       "drift_p": record.drift.p_value, "drift_tronco": drift_tronco, "trunk_ok": record.trunk_ok,
                       "best": record.best, "changes": {name: c.to_json() for name, c in record.changes.items()},
                       "ci_covers": record.ci_covers,
                       "answers": {name: a.headline() for name, a in record.answers.items()},
                       # drift at the last step with its interval (tatu.evals.forecast), from the third eval on
                       "forecast": None if record.forecast is None else record.forecast.to_json()},
            best={"step": best.step, best.set_name: best.ppl})
        self._publish()

    # --- every step ------------------------------------------------------------------------
    def tick(self, stats) -> dict:
        """A step finished: status, STATUS text, the watchdog. Returns the memory sample."""
        limit = self.config.mix_steps_limit
        elapsed = stats.seconds
        self._step_seconds = elapsed if self._step_seconds is None else 0.9 * self._step_seconds + 0.1 * elapsed
        tokens_per_s = stats.tokens_per_s
        if time.monotonic() - self._memory_sampled_at >= MEMORY_SAMPLE_S:
            self.memory, self._memory_sampled_at = memory.sample(), time.monotonic()
        else:
            self.memory = {**self.memory, "rss_mb": memory.rss_mb()}
        eta_s = (limit - stats.step) * self._step_seconds
        self.status.update(step=stats.step, limit=limit, loss=stats.loss, lr=stats.lr,
                           tokens_per_s=tokens_per_s, eta_s=round(eta_s, 1),
                           replay_fraction=stats.replay_fraction, memory=self.memory)
        if stats.replay_drawn:  # REPLAY_SOURCES: each source's share and what the run has drawn of it
            self.status["replay_sources"] = {"shares": self.config.replay_sources.to_json(), "drawn": stats.replay_drawn}
        self._publish()
        # `step 37/200 sftHeld 9.07 drift +1.2% 1830 tok/s ETA 12m`
        disk = " DISK LOW" if self.status.get("disk", {}).get("disk_low") else ""
        self.notifier.status(f"step {stats.step}/{limit} {self._eval_text()}{tokens_per_s:.0f} tok/s ETA {eta_s / 60:.0f}m{disk}")
        self.notifier.feed_watchdog()
        return self.memory

    def _eval_text(self) -> str:
        key, last = best_set(self.config.mode), self._last_eval
        return f"{key} {last.sets[key].ppl:.2f} drift {fmt_pct(last.drift.value)} " if last else ""

    @property
    def memory_low(self) -> bool:
        floor = self.config.mem_floor_mb
        return bool(floor) and self.memory["available_mb"] < floor
