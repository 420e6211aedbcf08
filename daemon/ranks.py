"""What each rank of a torchrun run keeps and shows of itself (the process group: distributed.py).

- its log: rank 0 the run's own; the others warnings and errors only, on stderr, with the rank;
- its supervisor: rank 0 the real one (socket, sd_notify); every rank reads requests from the
  snapshot agreed at each step boundary, so every rank stops, evaluates and saves at one step;
- its RNG and stream state: gathered into rank 0's resume state and given back on a restart,
  which must have the same world size.
"""
from __future__ import annotations

import sys

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
    from tatu.daemon.resume import restore_rng

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


def supervisor_for(world: World, config, origins) -> Supervisor:
    if not world.distributed:
        return Supervisor(config, origins)
    supervisor = Supervisor(config, origins) if world.is_main else _FollowerSupervisor(config, origins)
    supervisor.act_on_agreed_requests()
    return supervisor
