"""The mixed stream: per optimizer step, N micro-batches from each channel of the mix.

    stream = MixedStream(data_dir, mix={"sft": 8, "replay": 6}, micro_batch=4, seq_len=256, seed=0)
    step = stream.next_step()          # StepBatch: micro-batches in mix order, targets per channel
    state = stream.state_dict()        # small JSON-able dict: the whole position
    stream.load_state_dict(state)      # continues with exactly the batches that would have come

Text channel: windows of seq_len + 1 tokens at a stride of seq_len over the channel's token
shard (so every token but the first is a target exactly once per epoch), visited in a
permutation drawn from (seed, channel, epoch). x = w[:-1], y = w[1:], a BOS target ignored.

SFT channel: pairs, in a permutation drawn the same way, packed whole and greedily into rows
of seq_len + 1 ids; the rest of a row is PAD. Only response tokens (and their EOS) are
targets; PAD and prompt targets are IGNORE_INDEX.

Replay sources (tatu.data.replay, REPLAY_SOURCES): the mix's `replay` micro-batches are drawn
from several text channels by their shares; each micro-batch says its slot in the mix (`channel`:
"replay") and the data channel it was read from (`source`). Without sources the slot reads the
channel `replay`, and the stream, its state and its batches are what they were before sources.

Because each epoch's order is recomputed from (seed, channel, epoch), a channel's position
is two integers (epoch, cursor) and no permutation is ever stored; a replay source's count of
micro-batches drawn is its position too (windows taken / micro_batch).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tatu.data.manifest import DataConfigError, DataError, check_tokenizer, load_manifest
from tatu.data.replay import ReplaySources, source_problem

IGNORE_INDEX = -100  # the same value as tatu.model.gpt.IGNORE_INDEX (kept torch-free here)
STATE_VERSION = 2  # 2: the state pins the data (build_key), micro_batch and the mix
REPLAY_CHANNEL = "replay"


@dataclass
class MicroBatch:
    channel: str  # its slot in the mix: "sft", "replay", "pretrain"
    x: np.ndarray  # int64 (B, T)
    y: np.ndarray  # int64 (B, T), IGNORE_INDEX where nothing is predicted
    source: str = ""  # the data channel it was read from (a replay source, or the slot's own channel)

    @property
    def n_targets(self) -> int:
        return int((self.y != IGNORE_INDEX).sum())


@dataclass
class StepBatch:
    micro_batches: list[MicroBatch]
    target_tokens: dict[str, int]  # channel -> target tokens in this step
    replay_fraction: float  # replay targets / all targets of the step (0.0 when there are none)
    step: int = 0  # index of this step in the stream (0 for the first)
    epochs: dict[str, int] = field(default_factory=dict)  # data channel -> epoch the step ended in
    # with replay sources: source -> its target tokens in this step (in `target_tokens` they are "replay")
    replay_tokens: dict[str, int] = field(default_factory=dict)
    replay_drawn: dict[str, int] = field(default_factory=dict)  # source -> micro-batches drawn since the start, this step's too

    @property
    def total_targets(self) -> int:
        return sum(self.target_tokens.values())


def epoch_permutation(seed: int, channel: str, epoch: int, n: int) -> np.ndarray:
    """The visiting order of a channel's n items in an epoch; a pure function of its arguments."""
    channel_key = int.from_bytes(hashlib.sha256(channel.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([seed & (2**63 - 1), channel_key, epoch])).permutation(n)


class _Channel:
    """An endless, seeded sequence of items; position = (epoch, cursor into that epoch's order)."""

    def __init__(self, name: str, n_items: int, seed: int):
        self.name, self.n_items, self.seed = name, n_items, seed
        self.epoch = 0
        self.cursor = 0
        self._order_epoch = -1
        self._order = np.empty(0, dtype=np.int64)

    def _order_for(self, epoch: int) -> np.ndarray:
        if self._order_epoch != epoch:
            self._order = epoch_permutation(self.seed, self.name, epoch, self.n_items)
            self._order_epoch = epoch
        return self._order

    def peek(self) -> int:
        return int(self._order_for(self.epoch)[self.cursor])

    def advance(self) -> None:
        self.cursor += 1
        if self.cursor == self.n_items:
            self.epoch, self.cursor = self.epoch + 1, 0

    def take(self) -> int:
        item = self.peek()
        self.advance()
        return item

    @property
    def taken(self) -> int:
        """Items taken since the stream began (every epoch's)."""
        return self.epoch * self.n_items + self.cursor

    def state(self) -> dict:
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load(self, state: dict) -> None:
        if not isinstance(state, dict) or type(state.get("epoch")) is not int or type(state.get("cursor")) is not int:
            raise DataError(f"stream state for channel {self.name!r}: expected integer 'epoch' and 'cursor', "
                                     f"got {state!r}")
        epoch, cursor = state["epoch"], state["cursor"]
        if epoch < 0 or not 0 <= cursor < self.n_items:
            raise DataConfigError(f"stream state for channel {self.name!r}: epoch {epoch}, cursor {cursor} "
                                       f"out of range ({self.n_items} items)")
        self.epoch, self.cursor = epoch, cursor


class _TextChannel(_Channel):
    def __init__(self, name: str, tokens: np.ndarray, seq_len: int, seed: int, bos_id: int):
        n_windows = (len(tokens) - 1) // seq_len
        if n_windows < 1:
            raise DataError(f"channel {name!r} has {len(tokens)} tokens, fewer than seq_len + 1 = {seq_len + 1}")
        super().__init__(name, n_windows, seed)
        self.tokens, self.seq_len, self.bos_id = tokens, seq_len, bos_id

    def micro_batch(self, rows: int, slot: str | None = None) -> MicroBatch:
        windows = np.empty((rows, self.seq_len + 1), dtype=np.int64)
        for r in range(rows):
            start = self.take() * self.seq_len
            windows[r] = self.tokens[start:start + self.seq_len + 1]
        x, y = windows[:, :-1], windows[:, 1:].copy()
        y[y == self.bos_id] = IGNORE_INDEX
        return MicroBatch(slot or self.name, np.ascontiguousarray(x), y, self.name)


class _SFTChannel(_Channel):
    def __init__(self, name: str, ids: np.ndarray, mask: np.ndarray, offsets: np.ndarray, seq_len: int,
                 seed: int, pad_id: int):
        n_pairs = len(offsets) - 1
        if n_pairs < 1:
            raise DataError(f"channel {name!r} has no pairs")
        lengths = np.diff(offsets)
        longest = int(lengths.max())
        if longest > seq_len + 1:
            raise DataError(f"channel {name!r}: pair #{int(lengths.argmax())} is {longest} tokens, more than "
                                     f"seq_len + 1 = {seq_len + 1}; rebuild the data with --seq-len {seq_len}")
        super().__init__(name, n_pairs, seed)
        self.ids, self.mask, self.offsets = ids, mask, offsets
        self.seq_len, self.pad_id = seq_len, pad_id

    def micro_batch(self, rows: int) -> MicroBatch:
        width = self.seq_len + 1
        row_ids = np.full((rows, width), self.pad_id, dtype=np.int64)
        row_target = np.zeros((rows, width), dtype=bool)
        for r in range(rows):
            used = 0
            while True:
                pair = self.peek()
                start, end = int(self.offsets[pair]), int(self.offsets[pair + 1])
                # a row always takes its first pair (they all fit); later ones only if whole
                if used and used + end - start > width:
                    break
                row_ids[r, used:used + end - start] = self.ids[start:end]
                row_target[r, used:used + end - start] = self.mask[start:end].astype(bool)
                used += end - start
                self.advance()
        x = row_ids[:, :-1]
        y = np.where(row_target[:, 1:], row_ids[:, 1:], IGNORE_INDEX)
        return MicroBatch(self.name, np.ascontiguousarray(x), y, self.name)


class MixedStream:
    def __init__(self, data_dir: str | Path, mix: dict[str, int], micro_batch: int, seq_len: int, seed: int = 0,
                 tokenizer_hash: str | None = None, replay_channel: str = REPLAY_CHANNEL,
                 replay_sources: ReplaySources | None = None):
        self.data_dir = Path(data_dir)
        self.manifest = load_manifest(self.data_dir)
        if tokenizer_hash is not None:
            check_tokenizer(self.manifest, self.data_dir, tokenizer_hash)
        if micro_batch < 1 or seq_len < 1:
            raise DataConfigError(f"micro_batch={micro_batch}, seq_len={seq_len}: both must be >= 1")
        for name, count in mix.items():
            if not isinstance(count, int) or count < 0:
                raise DataConfigError(f"mix[{name!r}]={count!r}: expected a count of micro-batches >= 0")
        self.mix = {name: count for name, count in mix.items() if count > 0}
        if not self.mix:
            raise DataConfigError(f"mix {mix}: every channel has 0 micro-batches")
        channels = self.manifest["channels"]
        # the replay slot reads its sources only where it is in the mix
        self.replay_sources = replay_sources if replay_channel in self.mix else None
        for name in self.mix:
            if name not in channels and not (name == replay_channel and self.replay_sources):
                raise DataConfigError(f"mix channel {name!r} is not in {self.data_dir}/manifest.json "
                                           f"(channels: {', '.join(sorted(channels)) or 'none'})")
        for name in self.replay_sources.names if self.replay_sources else ():
            problem = source_problem(name, channels) or (
                f"replay source {name!r} is also a channel of the mix: its windows would be counted twice"
                if name in self.mix and name != replay_channel else None)
            if problem:
                raise DataConfigError(f"{self.data_dir}/manifest.json: {problem}")
        self.micro_batch, self.seq_len, self.seed = micro_batch, seq_len, seed
        self.replay_channel = replay_channel
        self.step = 0
        self._bos_id, self._pad_id = self._special_ids()
        self.channels = {name: self._open(name, channels[name]) for name in self._data_channels()}

    def _data_channels(self) -> list[str]:
        """The data channels the mix reads, in its order: the replay slot's sources in theirs."""
        out: list[str] = []
        for name in self.mix:
            out += list(self.replay_sources.names) if name == self.replay_channel and self.replay_sources else [name]
        return out

    def _special_ids(self) -> tuple[int, int]:
        from tatu.model.tokenizer_json import load_tokenizer

        tok = load_tokenizer(self.data_dir / self.manifest.get("tokenizer", "tokenizer.json"))
        return tok.bos_id, tok.pad_id

    def _memmap(self, rel: str, dtype: str) -> np.ndarray:
        path = self.data_dir / rel
        if path.stat().st_size == 0:
            return np.empty(0, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r")

    def _open(self, name: str, entry: dict) -> _Channel:
        files = entry["files"]
        if entry["kind"] == "text":
            return _TextChannel(name, self._memmap(files["tokens"], entry["dtype"]), self.seq_len, self.seed,
                                self._bos_id)
        if entry["kind"] == "sft":
            offsets = np.load(self.data_dir / files["offsets"])
            return _SFTChannel(name, self._memmap(files["ids"], entry["dtype"]), self._memmap(files["mask"], "uint8"),
                               offsets, self.seq_len, self.seed, self._pad_id)
        raise DataError(f"{self.data_dir}/manifest.json: channel {name!r} has unknown kind {entry['kind']!r}")

    def next_step(self) -> StepBatch:
        micro_batches: list[MicroBatch] = []
        targets = {name: 0 for name in self.mix}
        by_source = {name: 0 for name in self.replay_sources.names} if self.replay_sources else {}
        for name, count in self.mix.items():
            for _ in range(count):
                if name == self.replay_channel and self.replay_sources:
                    source = self.replay_sources.next_source(self.replay_drawn())
                    batch = self.channels[source].micro_batch(self.micro_batch, slot=name)
                    by_source[source] += batch.n_targets
                else:
                    batch = self.channels[name].micro_batch(self.micro_batch)
                targets[name] += batch.n_targets
                micro_batches.append(batch)
        total = sum(targets.values())
        replay = targets.get(self.replay_channel, 0)
        step = StepBatch(micro_batches, targets, replay / total if total else 0.0, self.step,
                         {name: ch.epoch for name, ch in self.channels.items()}, by_source, self.replay_drawn())
        self.step += 1
        return step

    def replay_drawn(self) -> dict[str, int]:
        """Replay source -> micro-batches drawn from it since the stream began (its channel's position:
        a source's windows are taken micro_batch at a time, by the replay slot alone)."""
        if not self.replay_sources:
            return {}
        return {name: self.channels[name].taken // self.micro_batch for name in self.replay_sources.names}

    def _pinned(self) -> dict:
        """What a saved position is only meaningful with: the data, the window and row sizes, the order."""
        pinned = {"seed": self.seed, "seq_len": self.seq_len, "micro_batch": self.micro_batch, "mix": dict(self.mix),
                  "tokenizer_hash": self.manifest["tokenizer_hash"], "build_key": self.manifest.get("build_key")}
        if self.replay_sources:  # absent without sources: a state saved before them reads as it did
            pinned["replay_sources"] = self.replay_sources.to_json()
        return pinned

    def state_dict(self) -> dict:
        return {"version": STATE_VERSION, **self._pinned(), "step": self.step,
                "channels": {name: ch.state() for name, ch in self.channels.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`, which must come from a stream over the same data, mix and sizes."""
        if not isinstance(state, dict):
            raise DataError(f"stream state: expected a JSON object, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise DataConfigError(f"stream state version {state.get('version')!r}, expected {STATE_VERSION}")
        pinned = self._pinned()
        # replay_sources is there only with sources: its absence from either side is a difference, not damage
        missing = [key for key in (*pinned, "step", "channels") if key not in state and key != "replay_sources"]
        if missing:
            raise DataError(f"stream state: malformed, missing {', '.join(missing)}")
        if type(state["step"]) is not int or state["step"] < 0 or not isinstance(state["channels"], dict):
            raise DataError(f"stream state: malformed, step {state['step']!r}, "
                                     f"channels of type {type(state['channels']).__name__}")
        differs = [f"{key} {state.get(key)!r} (now {pinned.get(key)!r})" for key in dict.fromkeys([*pinned, "replay_sources"])
                   if state.get(key) != pinned.get(key)]
        if differs:
            raise DataConfigError(f"stream state cannot continue this stream, it differs in: {'; '.join(differs)}")
        lacking = sorted(set(self.channels) - set(state["channels"]))
        if lacking:
            raise DataError(f"stream state: malformed, no position for channel {', '.join(lacking)}")
        for name, channel in self.channels.items():
            channel.load(state["channels"][name])
        self.step = state["step"]
