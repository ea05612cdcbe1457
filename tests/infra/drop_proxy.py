"""A TCP proxy in front of a real server that drops its connections on demand, as a load balancer or a
store's gateway that resets connections does: every open connection is reset (RST, SO_LINGER 0) and, for
a while, every new one is reset as soon as it is accepted. Used to make the S3 store under test drop
connections mid-epoch (tests/bench/s3/test_s3_drops.py); the server behind it is the real Ceph RGW."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST


def _reset(sock: socket.socket) -> None:
    """Reset the connection: SO_LINGER 0, then shutdown(SHUT_RD), which wakes a pump thread blocked in
    recv on it (a close alone does not while the recv holds the socket: the connection would stay up,
    idle, until the peer spoke), then close, which sends the RST."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


class DropProxy:
    """127.0.0.1:`port` forwarding to `target`; `forwarded` counts the bytes sent back to clients."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.forwarded = 0
        self.resets = 0
        self.dropped_at: int | None = None  # the bytes forwarded when drop_when dropped
        self._dropping_until = 0.0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self._dropping_until:
                self.resets += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            for sock in (client, upstream):  # no Nagle: a request's small segments go on at once
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
            with self._lock:
                self._open |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, back: bool) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if back:
                    self.forwarded += len(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._open -= {src, dst}
            _reset(src)
            _reset(dst)

    def drop(self, seconds: float) -> None:
        """Reset every open connection now, and every new one for `seconds`."""
        self._dropping_until = time.monotonic() + seconds
        with self._lock:
            current, self._open = self._open, set()
        self.resets += len(current) // 2
        for sock in current:
            _reset(sock)

    def drop_when(self, forwarded: int, seconds: float, timeout: float = 120.0) -> threading.Thread:
        """In the background: once `forwarded` bytes went back to clients, drop for `seconds`."""

        def wait_then_drop() -> None:
            deadline = time.monotonic() + timeout
            while self.forwarded < forwarded and time.monotonic() < deadline:
                time.sleep(0.02)
            self.dropped_at = self.forwarded
            self.drop(seconds)

        thread = threading.Thread(target=wait_then_drop, daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stopped = True
        _reset(self.listener)
        self.drop(0)


@contextlib.contextmanager
def drop_proxy(endpoint: str) -> Iterator[DropProxy]:
    """A DropProxy in front of `endpoint` (http://HOST:PORT), closed at the end."""
    host, port = endpoint.removeprefix("http://").rstrip("/").rsplit(":", 1)
    proxy = DropProxy((host, int(port)))
    try:
        yield proxy
    finally:
        proxy.close()
