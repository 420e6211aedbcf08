"""One client connection of the control server (server.py): its buffers, its state, and the
token bucket that bounds its rate (protocol.py's RATE_PER_S and RATE_BURST; its peer uid's, shared
by every connection of that uid, is the server's: UID_RATE_PER_S, UID_RATE_BURST), with the
server's per-connection policies: idle timeout, linger on close, reply backlog."""
from __future__ import annotations

import math
import selectors
import socket
import time

from tatu.daemon.control.protocol import RATE_BURST, RATE_PER_S, UID_RATE_BURST, UID_RATE_PER_S

# A client that sends nothing for this long is dropped, freeing its slot.
IDLE_TIMEOUT_S = 60.0
# Closing a Unix socket with unread input makes the peer's recv fail with ECONNRESET
# before it reads our last (error) reply; so a closing connection first shuts down its
# write side and discards input for up to this long (or this many bytes), then closes.
LINGER_S = 2.0
LINGER_MAX_BYTES = 1024 * 1024
# A client that stops reading replies cannot make the daemon buffer without bound.
MAX_PENDING_REPLY_BYTES = 8 * 1024 * 1024
# Paused connections resume on a grid of this step, so many paused clients wake the server
# thread together, a few times a second, rather than each on its own.
RESUME_TICK_S = 0.05


class TokenBucket:
    """`burst` requests at once, then `rate` a second, on a clock the caller passes (tests pass
    their own)."""
    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: int, now: float):
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), now

    def take(self, now: float) -> float:
        """Spend a token: 0.0 if there was one, else the seconds until there is one (none spent)."""
        self.tokens = min(float(self.burst), self.tokens + max(now - self.stamp, 0.0) * self.rate)
        self.stamp = max(now, self.stamp)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def wait(self, now: float) -> float:
        """The seconds until a token is there (0.0: one is), none spent."""
        tokens = min(float(self.burst), self.tokens + max(now - self.stamp, 0.0) * self.rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate


def take_both(first: TokenBucket, second: TokenBucket, now: float) -> float:
    """A token from each bucket, or from neither: 0.0 if both had one, else the seconds until both will."""
    wait = max(first.wait(now), second.wait(now))
    if wait:
        return wait
    first.take(now)
    second.take(now)
    return 0.0


class UidBuckets(dict):
    """peer uid -> the token bucket every connection of that uid spends from (made at its first)."""

    def __missing__(self, uid: int) -> TokenBucket:
        bucket = self[uid] = TokenBucket(UID_RATE_PER_S, UID_RATE_BURST, time.monotonic())
        return bucket


def on_resume_grid(t: float) -> float:
    """`t` rounded up to the resume grid (RESUME_TICK_S)."""
    return math.ceil(t / RESUME_TICK_S) * RESUME_TICK_S


class Connection:
    """One client of the control server: its buffers, where it stands, its token bucket."""

    __slots__ = ("sock", "inbox", "outbox", "closing", "last_active", "linger_until", "discarded", "bucket",
                 "paused_until", "served", "events", "uid_bucket", "prepaid")

    def __init__(self, sock: socket.socket, served: bool, uid_bucket: TokenBucket | None = None):
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()
        self.closing = False  # close once the outbox is flushed
        self.last_active = time.monotonic()
        self.linger_until: float | None = None  # set once the final reply is flushed
        self.discarded = 0
        self.bucket = TokenBucket(RATE_PER_S, RATE_BURST, self.last_active)
        self.paused_until: float | None = None  # over its rate: not read until then
        self.served = served  # counts against MAX_CONNECTIONS (a refused one only lingers)
        self.events = 0  # what the selector watches for it (0: not registered)
        self.uid_bucket = uid_bucket  # its peer uid's, shared with that uid's other connections
        self.prepaid = False  # its first line's uid token taken at its admission (admit)

    def pause(self, now: float, wait: float) -> float:
        """Over its rate: not read until a token is back (`wait` from now, rounded up to the
        resume grid); the seconds the client is told to wait."""
        self.paused_until = on_resume_grid(now + wait)
        return round(self.paused_until - now, 3)

    def take(self, now: float) -> float:
        """A token from its own bucket and its uid's (or from neither): 0.0, else the seconds until both
        have one. Its first line's uid token was taken when it was admitted."""
        if self.uid_bucket is None or self.prepaid:
            self.prepaid = False
            return self.bucket.take(now)
        return take_both(self.bucket, self.uid_bucket, now)

    def admit(self, now: float) -> float:
        """At accept: one of its uid's tokens, for its first line or its refusal: 0.0, else the seconds
        until its uid has one (then it is answered `rate limited` and closed)."""
        wait = 0.0 if self.uid_bucket is None else self.uid_bucket.take(now)
        self.prepaid = self.uid_bucket is not None and not wait
        return wait

    def watch(self, selector: selectors.BaseSelector) -> None:
        """Have `selector` watch it for what it needs now (nothing: not registered)."""
        events = self.wanted_events()
        if events == self.events:
            return
        if not events:
            selector.unregister(self.sock)
        elif not self.events:
            selector.register(self.sock, events, self)
        else:
            selector.modify(self.sock, events, self)
        self.events = events

    def wanted_events(self) -> int:
        """Input unless paused, output while replies wait (0: nothing to watch for now)."""
        return (0 if self.paused_until is not None else selectors.EVENT_READ) | \
            (selectors.EVENT_WRITE if self.outbox else 0)
