"""The control server's listening socket as its selector watches it: accepting, or not. Not while the
refused connections fill their quota (until a slot is free), nor while a peer uid is over its rate
(until a token is back): meanwhile new clients wait in the listen backlog, in their own connect."""
from __future__ import annotations

import selectors
import socket
import time


class Listener:
    def __init__(self, sock: socket.socket, selector: selectors.BaseSelector):
        self.sock, self.selector = sock, selector
        self.accepting = False  # watched by the selector
        self.held_until: float | None = None  # a uid over its rate: not watched before then

    def stop(self, until: float | None = None) -> None:
        """Not watched: until `resume` (a slot is free), and not before `until` when given."""
        if self.accepting:
            self.selector.unregister(self.sock)
            self.accepting = False
        if until is not None:
            self.held_until = until

    def resume(self) -> None:
        """Watched again, unless held and not yet due (a no-op when accepting)."""
        if self.held_until is not None:
            if time.monotonic() < self.held_until:
                return
            self.held_until = None
        if not self.accepting:
            self.selector.register(self.sock, selectors.EVENT_READ, None)
            self.accepting = True
