"""The control socket's protocol (design contract): newline-delimited JSON over a Unix stream socket.

One request per line, one reply per line:
    {"v":1,"cmd":"status"}  ->  {"v":1,"ok":true, ...handler's fields}
    anything wrong          ->  {"v":1,"ok":false,"error":"..."}
A request is at most MAX_REQUEST_BYTES long and MAX_REQUEST_DEPTH deep (checked before it is
parsed: json.loads recurses once per level); whatever goes wrong while handling one, the
client gets an error reply.
"""
from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate
from typing import Callable

PROTOCOL_VERSION = 1
MAX_REQUEST_BYTES = 64 * 1024
# Every command is a flat object; a little nesting is allowed for arguments to come.
MAX_REQUEST_DEPTH = 16
# The limits on what clients may cost the daemon (docs/operations.md names them; nothing else
# restates the numbers). Same-uid clients are trusted, but a runaway script must not slow the
# run: the control thread shares the interpreter lock with the training loop.
# At most this many clients are served at once; the next one gets a one-line refusal
# (`too_many_clients_reply`), then EOF. 32: `tatu status --watch`, a sweep and a few scripts at
# once, with room; the listen backlog has the same size.
MAX_CONNECTIONS = 32
# Per connection, a token bucket: RATE_BURST requests at once (a script pipelining a batch of
# commands), then RATE_PER_S a second. Every request line spends a token, malformed or not; one
# over the limit gets `rate_limited_reply` and the server reads nothing more from that
# connection until a token is back. 10/s: a person or a polling script asks about once a second.
RATE_PER_S = 10.0
RATE_BURST = 64
# Per peer uid (SO_PEERCRED), across all its connections, a second token bucket every request line
# also spends: a client that reconnects for each request gets a fresh connection bucket each time,
# but not a fresh uid bucket. A connection is admitted with one of its uid's tokens (its first line's,
# or its refusal's); one that finds none gets `rate_limited_reply`, then EOF, and no other connection
# is accepted until a token is back (they wait in the listen backlog: reconnecting gains nothing).
# The uid's burst holds a few connections' bursts; its rate, `tatu status --watch`, a sweep and scripts together.
UID_RATE_PER_S = 40.0
UID_RATE_BURST = 256

Handler = Callable[[dict], dict]

# nesting_depth's tables: a JSON string (its end, or the line's), and [ { ] } as signed bytes +1/-1.
_STRING = re.compile(rb'"(?:[^"\\]+|\\.)*(?:"|\\?\Z)', re.DOTALL)
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def error_reply(message: str) -> dict:
    return {"v": PROTOCOL_VERSION, "ok": False, "error": message}


def encode_reply(reply: dict) -> bytes:
    """A reply as its line on the wire (one that is not JSON becomes an error reply saying so)."""
    try:
        encoded = json.dumps(reply, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        encoded = json.dumps(error_reply(f"reply is not JSON-serializable: {exc}")).encode("utf-8")
    return encoded + b"\n"


def rate_limited_reply(retry_after_s: float) -> dict:
    """A request over the connection's rate: not handled; the same request may be sent again
    after `retry_after_s` seconds."""
    return {**error_reply("rate limited"), "retry_after_s": retry_after_s}


def too_many_clients_reply() -> dict:
    """The only line a client over MAX_CONNECTIONS gets before the server closes its connection."""
    return error_reply(f"too many clients: {MAX_CONNECTIONS} are connected; try again later")


def nesting_depth(line: bytes) -> int:
    """The deepest nesting of [ and { in a JSON text, outside strings (no parsing, no recursion).

    In C-speed steps (a 64 KB line of brackets takes ~1.5 ms; a byte-by-byte Python loop took 15x
    that, which a client could ask for at its full rate): strings removed (a backslash escapes the
    next byte; an unclosed string runs to the end), brackets mapped to +1/-1, the running sum's
    maximum. Brackets need not balance: a closer below depth 0 goes negative, as counted."""
    steps = _STRING.sub(b"", line).translate(_BRACKET_STEPS, _NOT_BRACKETS)
    return max(0, max(accumulate(array("b", steps)), default=0))


def dispatch(handlers: dict[str, "Handler"], line: bytes) -> dict:
    """One request line -> one reply object. Never raises."""
    try:
        return _dispatch(handlers, line)
    except Exception as exc:  # whatever the request did, the protocol promises a reply
        return error_reply(f"request could not be handled: {type(exc).__name__}: {exc}"[:500])


def _dispatch(handlers: dict[str, "Handler"], line: bytes) -> dict:
    depth = nesting_depth(line)
    if depth > MAX_REQUEST_DEPTH:
        return error_reply(f"request nested {depth} levels deep; at most {MAX_REQUEST_DEPTH} are accepted")
    try:
        request = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return error_reply("request is not valid UTF-8")
    except ValueError as exc:
        return error_reply(f"request is not valid JSON: {exc}")
    if not isinstance(request, dict):
        return error_reply(f"request must be a JSON object, got {type(request).__name__}")
    version = request.get("v")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        return error_reply(f"unsupported protocol version v={version!r}; this daemon speaks v={PROTOCOL_VERSION}")
    cmd = request.get("cmd")
    if not isinstance(cmd, str):
        return error_reply(f"missing or non-string 'cmd'; known commands: {', '.join(sorted(handlers))}")
    handler = handlers.get(cmd)
    if handler is None:
        return error_reply(f"unknown cmd {cmd!r}; known commands: {', '.join(sorted(handlers))}")
    try:
        result = handler(request)
    except Exception as exc:  # a handler bug must not take the server (or the run) down
        return error_reply(f"{cmd} failed: {type(exc).__name__}: {exc}")
    if not isinstance(result, dict):
        return error_reply(f"{cmd} handler returned {type(result).__name__}, not an object")
    return {**result, "v": PROTOCOL_VERSION, "ok": True}
