"""Replay sources: which text channels of the data dir a step's replay micro-batches come from, and
in what shares (`REPLAY_SOURCES=replay:0.5,ptReplay:0.5`; unset: every replay micro-batch from the
channel `replay`, as before sources existed).

What a share means: the fraction of the run's REPLAY_N replay micro-batches drawn from that source,
counted over the run, not per step. The k-th replay micro-batch of the run (k = 0, 1, 2, ... over
every step's REPLAY_N) comes from the source whose deficit `share * (k + 1) - drawn` is largest
(exact fractions; a tie goes to the source listed first). So after any k replay micro-batches every
source has drawn within one micro-batch of share * k, at every step and not only on average, and
with REPLAY_N=1 and two halves the steps alternate. A text micro-batch is micro_batch windows of
seq_len tokens, each a target but a document's BOS: so a share of replay micro-batches is, up to
those BOS targets, the same share of the replay's target tokens, and, the loss being token-weighted
over the whole step, of the replay's part of the gradient. The step's own counts are in its event
(`replay_tokens`, source -> target tokens).

A source's drawn count is its channel's position in the stream (windows taken / micro_batch), so the
schedule resumes from the stream's saved state with nothing else stored.

Pure Python (no numpy, no torch): daemon/config.py parses REPLAY_SOURCES with it.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

# The channel replay reads when REPLAY_SOURCES is unset (tatu.data.stream.REPLAY_CHANNEL's value).
DEFAULT_SOURCE = "replay"
EXAMPLE = "replay:0.5,ptReplay:0.5"


@dataclass(frozen=True)
class ReplaySources:
    """(text channel, share) in the order given; the shares are exact and sum to 1."""

    shares: tuple[tuple[str, Fraction], ...]

    @classmethod
    def parse(cls, text: str) -> ReplaySources:
        """`name:share,name:share` (a share is a decimal or a ratio: 0.5, 1/3), or one bare name (share 1).
        ValueError saying what is wrong."""
        parts = [part.strip() for part in str(text).split(",")]
        if len(parts) == 1 and parts[0] and ":" not in parts[0]:
            parts = [f"{parts[0]}:1"]
        shares: list[tuple[str, Fraction]] = []
        for part in parts:
            name, colon, value = part.partition(":")
            name, value = name.strip(), value.strip()
            if not colon or not name or not value:
                raise ValueError(f"{part!r} is not NAME:SHARE (e.g. {EXAMPLE})")
            if not name.replace("_", "").replace("-", "").isalnum() or name.startswith((".", "-")):
                raise ValueError(f"{name!r} is not a channel name")
            try:
                share = Fraction(value)
            except (ValueError, ZeroDivisionError):
                raise ValueError(f"{name}: share {value!r} is not a number (0.5, 1/3)") from None
            if not 0 < share <= 1:
                raise ValueError(f"{name}: share {value} must be above 0 and at most 1")
            if any(name == seen for seen, _ in shares):
                raise ValueError(f"{name} is named twice")
            shares.append((name, share))
        total = sum(share for _, share in shares)
        if total != 1:
            raise ValueError(f"the shares sum to {float(total):g}, not 1 (e.g. {EXAMPLE}; 1/3 is exact)")
        return cls(tuple(shares))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.shares)

    def text(self) -> str:
        """`replay:1/2,ptReplay:1/2`: the exact shares, in the order given."""
        return ",".join(f"{name}:{share}" for name, share in self.shares)

    def to_json(self) -> list[list[str]]:
        """[[name, "1/2"], ...]: ordered (the order breaks ties) and exact."""
        return [[name, str(share)] for name, share in self.shares]

    def next_source(self, drawn: dict[str, int]) -> str:
        """The source of the next replay micro-batch, given each source's micro-batches drawn so far."""
        k = sum(drawn[name] for name in self.names)
        best, chosen = None, self.names[0]
        for name, share in self.shares:
            deficit = share * (k + 1) - drawn[name]
            if best is None or deficit > best:  # strictly: a tie stays with the source listed first
                best, chosen = deficit, name
        return chosen

    def describe(self) -> str:
        """`replay 50%, ptReplay 50%` (what `tatu status` and the start line say)."""
        return ", ".join(f"{name} {float(share) * 100:.4g}%" for name, share in self.shares)


def source_problem(name: str, channels: dict) -> str | None:
    """Why a replay source cannot be read from a manifest's `channels` (None: it can): a channel the
    data lacks (naming the nearest text channel), or one that is not text (SFT pairs are not replay)."""
    from tatu.names import nearest

    if name not in channels:
        texts = sorted(n for n, entry in channels.items() if entry.get("kind") == "text")
        meant = nearest(name, texts)
        return (f"replay source {name!r} is not a channel of the data" + (f" (did you mean {meant}?)" if meant else "")
                + f"; its text channels: {', '.join(texts) or 'none'}")
    if channels[name].get("kind") != "text":
        return f"replay source {name!r} is a {channels[name].get('kind')} channel, not text: replay reads text"
    return None
