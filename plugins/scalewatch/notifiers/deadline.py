"""One total deadline for a whole delivery, not a per-read socket timeout.

A socket timeout bounds each read, so a receiver that sends one byte every few seconds never trips it.
The delivery runs in a worker thread that the caller waits for at most the deadline; at the deadline
every socket the delivery registered is shut down, so the worker stops too and sends nothing late
(a late e-mail after a reported failure would arrive twice on a retry).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class DeliveryTimeout(TimeoutError):
    """A delivery did not finish (connect, send and reply together) within its deadline."""


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._owners: list[Callable[[], socket.socket | None]] = []
        self._expired = False

    def remaining(self) -> float:
        """Seconds left, for connect timeouts; never 0 (which would make a socket non-blocking)."""
        return max(self._end - time.monotonic(), 0.01)

    def track(self, current_socket: Callable[[], socket.socket | None]) -> None:
        """Register a way to get the delivery's socket as it is at expiry (STARTTLS replaces it)."""
        with self._lock:
            self._owners.append(current_socket)
            expired = self._expired
        if expired:
            _cut(current_socket())

    def expire(self) -> None:
        with self._lock:
            self._expired = True
            owners = list(self._owners)
        for current_socket in owners:
            _cut(current_socket())


def _cut(sock: socket.socket | None) -> None:
    """Shut the connection down under a blocked read (it returns at once); the base method, so a TLS
    socket is cut at its file descriptor without touching its TLS state from this thread."""
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed or never connected
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def within(seconds: float, what: str, deliver: Callable[[Deadline], T]) -> T:
    """Run `deliver(deadline)`, returning its result or raising its error; DeliveryTimeout at the deadline."""
    deadline = Deadline(seconds)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = deliver(deadline)
        except BaseException as error:  # handed to the caller's thread as is
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"deliver {what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        deadline.expire()
        worker.join(1.0)  # normally ends at once; a stuck name lookup is left to its daemon thread
        raise DeliveryTimeout(f"{what} did not finish within {seconds:g} s (connect, send and reply together)")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
