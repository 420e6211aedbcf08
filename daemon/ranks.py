"""What each rank of a torchrun run keeps and shows of itself (the process group: distributed.py).

- its log: rank 0 the run's own; the others warnings and errors only, on stderr, with the rank;
- its supervisor: rank 0 the real one (socket, sd_notify); every rank reads requests from the
  snapshot agreed at each step boundary, so every rank stops, evaluates and saves at one step;
- its RNG and stream state: gathered into rank 0's resume state and given back on a restart,
  which must have the same world size.
"""
from __future__ import annotations

import sys

import torch

from tatu.daemon.config import ConfigError
from tatu.daemon.distributed import World
from tatu.daemon.supervisor import Supervisor



def check_resume_world(saved: dict, world: World, run: str) -> None:
    """A state saved by N ranks continues on N ranks: the RNG streams are per rank."""
    saved_size = (saved.get("ranks") or {}).get("world_size", 1)
    if saved_size != world.size:
        raise ConfigError(f"run {run} was saved by {saved_size} rank(s) and is restarted on {world.size}: "
                          f"restart it with --nproc-per-node/--nnodes giving WORLD_SIZE={saved_size}, or start a new TATU_RUN")


def restore_rank_state(saved: dict, extra_tensors: dict, stream, world: World) -> None:
    """A rank other than 0 takes back its own RNG and stream state (rank 0's are the usual ones)."""
    if not world.distributed or world.is_main:
        return
    from tatu.daemon.state import restore_rng

    entry = next(s for s in saved["ranks"]["states"] if s["rank"] == world.rank)
    stream.load_state_dict(entry["stream"])
    restore_rng(entry["rng"], extra_tensors[f"rng_rank{world.rank}"])


def rank_states_for_saving(gathered: list[dict] | None) -> tuple[dict | None, dict]:
    """(the resume JSON's "ranks" entry, extra tensors) from gather_rank_states' list."""
    if gathered is None:
        return None, {}
    streams = [g["stream"] for g in gathered]
    if any(s != streams[0] for s in streams):  # every rank draws the whole step: a difference is a bug
        raise RuntimeError(f"stream states differ across ranks: {streams}")
    states = [{"rank": g["rank"], "rng": g["rng"], "stream": g["stream"]} for g in gathered if g["rank"] != 0]
    tensors = {f"rng_rank{g['rank']}": g["rng_tensors"] for g in gathered if g["rank"] != 0}
    return {"world_size": len(gathered), "states": states}, tensors


class FollowerLog:
    """A rank other than 0: no files; warnings and errors on stderr, prefixed with the rank."""

    def __init__(self, rank: int):
        self.rank = rank

    def info(self, message: str, **fields) -> None:
        pass

    def warning(self, message: str, **fields) -> None:
        print(f"rank {self.rank}: WARNING: {message}", file=sys.stderr, flush=True)

    def error(self, message: str, **fields) -> None:
        print(f"rank {self.rank}: ERROR: {message}", file=sys.stderr, flush=True)

    def event(self, kind: str, **data) -> dict:
        return {"event": kind, **data}

    def attach(self, run_dir) -> None:
        pass

    def close(self) -> None:
        pass


def log_for(world: World, log):
    return log if world.is_main else FollowerLog(world.rank)


class _FollowerSupervisor(Supervisor):
    """A rank other than 0: no control socket and no sd_notify (the environment holds no
    NOTIFY_SOCKET), but SIGTERM still asks for a stop, which the boundary agreement spreads."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:  # no socket to close; signals are daemon/signals.py's
        return None


class AgreedSupervisor:
    """The supervisor as every rank sees it: stop, eval and checkpoint requests and low memory
    are read from the snapshot that `agree()` takes at each step boundary, the same on every rank."""

    def __init__(self, inner: Supervisor, world: World):
        self.inner, self.world = inner, world
        self._stop = self._eval = self._checkpoint = self._memory_low = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        if name in ("inner", "world") or name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    def __enter__(self):
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)

    def agree(self) -> None:
        inner = self.inner
        local = [inner.stop_requested, inner.eval_requested, inner.checkpoint_requested, inner.memory_low]
        inner.clear_eval_request()  # taken into this boundary's snapshot; a later one waits for the next
        inner.clear_checkpoint_request()
        flags = torch.tensor([int(f) for f in local], dtype=torch.int64)
        if torch.distributed.get_backend() == "nccl":
            flags = flags.cuda()
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        self._stop, self._eval, self._checkpoint, self._memory_low = (bool(v) for v in flags.tolist())

    @property
    def stop_requested(self) -> bool:
        return self._stop

    @property
    def eval_requested(self) -> bool:
        return self._eval

    @property
    def checkpoint_requested(self) -> bool:
        return self._checkpoint

    @property
    def memory_low(self) -> bool:
        return self._memory_low

    def clear_eval_request(self) -> None:
        self._eval = False

    def clear_checkpoint_request(self) -> None:
        self._checkpoint = False


def supervisor_for(world: World, config, origins):
    if not world.distributed:
        return Supervisor(config, origins)
    inner = Supervisor(config, origins) if world.is_main else _FollowerSupervisor(config, origins)
    return AgreedSupervisor(inner, world)
