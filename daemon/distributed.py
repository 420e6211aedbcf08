"""One run on several processes: torchrun starts the ranks, DistributedDataParallel keeps them in step.

    python -m tatu.daemon.launch --nproc-per-node=N    (torchrun's own arguments; what the DDP unit runs)
    torchrun --nproc-per-node=N -m tatu.daemon          (the same run; torchrun exits 1 on any failure)

Alone (no WORLD_SIZE, or WORLD_SIZE=1) a run takes the single-process path unchanged: SINGLE
below does nothing. Under torchrun:

- the step: every rank draws the WHOLE step from its own MixedStream (same seed, same
  position), so the stream state and the step's target-token count are identical on every rank
  without a collective, and rank r backpropagates the contiguous block `share(n, world, r)` of the
  step's n = SFT_GE + REPLAY_N micro-batches, each divided by the whole step's target tokens.
  Gradients are SUMMED across ranks (a DDP comm hook), not averaged: the sum of every
  micro-batch's token-weighted gradient is the single-process gradient whatever the split, so
  ranks may hold unequal counts when N does not divide n (3 micro-batches on 2 ranks: 2 and 1)
  and nothing needs rescaling. More ranks than micro-batches is refused (78).
- evals: a set's scoring batches (the very batches one process builds) are dealt round robin;
  the per-batch row sums are gathered and added in the single-process order, so every per-line
  NLL is the single-process one, and so is every metric, CI and drift computed from them.
- requests: a stop (SIGTERM on any rank, `stop` on rank 0's socket), eval and checkpoint
  requests and low memory are agreed at each step boundary by one all-reduce: every rank acts
  at the same step, so every rank saves the same consistent state.
- rank 0 alone writes (the run's log, events, checkpoints, verdict), serves the control socket and
  talks to systemd; the other ranks log warnings and errors only, prefixed with their rank.
  Their RNG and stream states go into rank 0's resume state, and a restart needs the same
  world size (78 otherwise). What each rank keeps and shows of itself: daemon/ranks.py.
"""
from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta

import torch

from tatu.daemon.config import ConfigError

# A collective that waits longer than this is a dead peer: fail (and let systemd restart the run)
# rather than hang. An eval or a save on rank 0 is the longest wait the others see.
COLLECTIVE_TIMEOUT = timedelta(minutes=30)


def share(n: int, world_size: int, rank: int) -> range:
    """The micro-batches rank `rank` backpropagates: a contiguous block, the first n % world_size
    ranks one more. A pure function of (n, world_size, rank): the same at every step and restart."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # --- the step -----------------------------------------------------------------------
    def mine(self, micro_batches: list) -> list:
        return [micro_batches[i] for i in share(len(micro_batches), self.size, self.rank)]

    def data_parallel(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """What the step's forward runs: DDP with summed gradients, or the model itself alone."""
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        ddp.register_comm_hook(state=None, hook=_sum_gradients)
        return ddp

    @staticmethod
    def reduced_per_step(forward_model) -> tuple[int, int]:
        """(tensors, bytes) DDP all-reduces each step, as DDP itself counts them: what trains only
        (DDP leaves out parameters with requires_grad False). torch exposes the count privately."""
        data = forward_model._get_ddp_logging_data()
        return int(data["num_parameter_tensors"]), int(data["total_parameter_size_bytes"])

    def seed_rank(self, seed: int) -> None:
        """Ranks after 0 draw their own dropout masks (rank 0 keeps the single-process stream);
        without this every rank would repeat rank 0's masks on its micro-batches."""
        if self.distributed and not self.is_main:
            torch.manual_seed(seed + self.rank)

    def no_sync(self, forward_model, last: bool):
        """Gradients are all-reduced once per step, on the rank's last micro-batch."""
        return forward_model.no_sync() if self.distributed and not last else nullcontext()

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        if self.distributed:
            torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM)
        return value

    # --- evals --------------------------------------------------------------------------
    @property
    def map_batches(self):
        """evals.scoring's hook: which rank scores which batch (None: this process scores all)."""
        return _ShardedMap(self) if self.distributed else None

    # --- step boundaries ----------------------------------------------------------------
    def at_step_boundary(self, supervisor) -> None:
        if self.distributed:
            supervisor.agree(self.any_rank)

    def any_rank(self, flags: list[bool]) -> list[bool]:
        """Each flag true on any rank (a MAX all-reduce), the same list on every rank."""
        tensor = torch.tensor([int(f) for f in flags], dtype=torch.int64)
        if torch.distributed.get_backend() == "nccl":
            tensor = tensor.cuda()
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
        return [bool(v) for v in tensor.tolist()]

    def gather_rank_states(self, stream) -> list[dict] | None:
        """Every rank's RNG and stream state, on rank 0, for the resume state (None alone)."""
        if not self.distributed:
            return None
        from tatu.daemon.resume import rng_state

        doc, tensors = rng_state()
        mine = {"rank": self.rank, "rng": doc, "rng_tensors": tensors, "stream": stream.state_dict()}
        gathered = [None] * self.size if self.is_main else None
        torch.distributed.gather_object(mine, gathered, dst=0)
        return gathered


SINGLE = World()


def _sum_gradients(_state, bucket):
    # DDP's default hook divides by the world size; the step's loss is already divided by the
    # whole step's target tokens, so the token-weighted gradient is the plain sum.
    work = torch.distributed.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


class _ShardedMap:
    """Batch i is scored by rank i % size; the results are gathered and returned in order."""

    def __init__(self, world: World):
        self.world = world

    def __call__(self, score, batches: list) -> list:
        mine = {i: score(batch) for i, batch in enumerate(batches) if i % self.world.size == self.world.rank}
        gathered = [None] * self.world.size
        torch.distributed.all_gather_object(gathered, mine)
        merged = {i: value for part in gathered for i, value in part.items()}
        return [merged[i] for i in range(len(batches))]


# --- joining and leaving -----------------------------------------------------------------

def world_from_environment(environ=None) -> World:
    """RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them; a plain process is SINGLE."""
    env = os.environ if environ is None else environ
    try:
        size = int(env.get("WORLD_SIZE", "1"))
        rank, local_rank = int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0"))
    except ValueError:
        raise ConfigError(f"WORLD_SIZE/RANK/LOCAL_RANK must be integers (got {env.get('WORLD_SIZE')!r}, "
                          f"{env.get('RANK')!r}, {env.get('LOCAL_RANK')!r}): start several ranks with torchrun") from None
    if size < 1 or not 0 <= rank < size:
        raise ConfigError(f"RANK={rank} with WORLD_SIZE={size}: start several ranks with torchrun")
    return World(rank, size, local_rank) if size > 1 else SINGLE


def join(config, device: torch.device) -> tuple[World, torch.device]:
    """The process group (gloo on CPU, NCCL on CUDA, one GPU per LOCAL_RANK) and this rank's device."""
    world = world_from_environment()
    if not world.distributed:
        return world, device
    n_micro = sum(config.mix.values())
    if world.size > n_micro:
        raise ConfigError(f"WORLD_SIZE={world.size} exceeds the {n_micro} micro-batches of a step "
                          f"(SFT_GE + REPLAY_N): a rank would have nothing to do")
    if device.type == "cuda":
        if world.local_rank >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK={world.local_rank} but this machine has {torch.cuda.device_count()} GPUs")
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ConfigError(f"TATU_DEVICE={config.device}: several ranks run on cuda (NCCL) or cpu (gloo), not {device.type}")
    _watchdog_belongs_to_rank0(world)
    torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=world.rank,
                                         world_size=world.size, timeout=COLLECTIVE_TIMEOUT)
    return world, device


def leave(world: World) -> None:
    if world.distributed and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _watchdog_belongs_to_rank0(world: World) -> None:
    # systemd addresses WATCHDOG_USEC to the unit's main process, the launcher (our parent);
    # rank 0 feeds the watchdog for it (NotifyAccess=all), so it takes the variables as its own.
    # The other ranks must not touch systemd at all.
    if world.is_main and os.environ.get("WATCHDOG_PID") == str(os.getppid()):
        os.environ["WATCHDOG_PID"] = str(os.getpid())
    if not world.is_main:
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
            os.environ.pop(name, None)
