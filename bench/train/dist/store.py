"""The DDP ranks' rendezvous store: torch's Store interface over a small authenticated TCP protocol.

Why not torch's TCPStore: it has no authentication, lists its keys to anyone who connects
(`list_keys`), and takes any key or value size, so whoever reaches its port can read a run's keys,
write into them or fill the host's memory. This store:
- answers nothing before a connection proves it holds the run's secret (HMAC-SHA256 over a fresh
  server challenge, so the secret itself never crosses the network);
- bounds every key, value, frame, the number of keys, the bytes held and the connections;
- listens on exactly the address it is given (127.0.0.1 for a run on one host).
It carries only what torch's collectives need at start (Gloo's and NCCL's addresses, counters);
nothing in it is ever unpickled.

Frames: 4-byte big-endian length, then a JSON header, a NUL, and the raw value bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import socketserver
import struct
import threading
import time
from datetime import timedelta

from bench.errors import LaunchError

SECRET_ENV = "SCALEWATCH_RENDEZVOUS_SECRET"
MAX_KEY = 512
MAX_VALUE = 1 << 20  # Gloo's and NCCL's start-up records are under a kilobyte each
MAX_KEYS = 65536
MAX_BYTES = 64 << 20
MAX_CONNECTIONS = 1024
HANDSHAKE_S = 10.0
_FRAME = struct.Struct(">I")


class StoreError(LaunchError):
    """The rendezvous store refused a request, or could not be reached."""


def horovod_token(secret: str) -> str:
    """What a Horovod rank presents in every rendezvous URL: derived from the run's secret, so the
    secret itself is never sent in clear (Horovod's C++ HTTP client can send nothing but a URL)."""
    return hmac.new(secret.encode(), b"scalewatch horovod rendezvous", hashlib.sha256).hexdigest()[:32]


def horovod_url_addr(addr: str, port: int | str, secret: str) -> str:
    """HOROVOD_GLOO_RENDEZVOUS_ADDR carrying the token: Horovod builds its URLs as
    `http://ADDR:PORT/SCOPE/KEY`, so ADDR `a:p/TOKEN` gives `http://a:p/TOKEN:p/SCOPE/KEY`."""
    return f"{addr}:{port}/{horovod_token(secret)}"


def new_secret() -> str:
    """A run's rendezvous secret: 256 random bits, hex (safe in env, files and URLs)."""
    return secrets.token_hex(32)


def _proof(secret: str, challenge: bytes) -> str:
    return hmac.new(secret.encode(), challenge, hashlib.sha256).hexdigest()


def _send(sock: socket.socket, header: dict, value: bytes = b"") -> None:
    body = json.dumps(header).encode() + b"\0" + value
    sock.sendall(_FRAME.pack(len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 16))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, limit: int) -> tuple[dict, bytes]:
    (size,) = _FRAME.unpack(_recv_exact(sock, _FRAME.size))
    if size > limit:
        raise StoreError(f"rendezvous store: a frame of {size} bytes is over the {limit}-byte limit")
    body = _recv_exact(sock, size)
    head, sep, value = body.partition(b"\0")
    if not sep:
        raise StoreError("rendezvous store: malformed frame")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise StoreError("rendezvous store: malformed frame")
    return header, value


class _Data:
    """The keys and values, with the bounds, behind one condition (waits wake on every write)."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.bytes = 0
        self.cond = threading.Condition()

    def put(self, key: str, value: bytes) -> None:
        if len(key.encode()) > MAX_KEY or len(value) > MAX_VALUE:
            raise StoreError(f"rendezvous store: key or value over its limit ({MAX_KEY} / {MAX_VALUE} bytes)")
        old = self.values.get(key)
        grown = self.bytes + len(key) + len(value) - (0 if old is None else len(key) + len(old))
        if (old is None and len(self.values) >= MAX_KEYS) or grown > MAX_BYTES:
            raise StoreError("rendezvous store: full")
        self.values[key], self.bytes = value, grown
        self.cond.notify_all()

    def wait_for(self, keys: list[str], timeout_s: float) -> bool:
        return self.cond.wait_for(lambda: all(k in self.values for k in keys), timeout=max(0.0, timeout_s))


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        with self.server.slots_lock:
            if self.server.connections >= MAX_CONNECTIONS:
                return
            self.server.connections += 1
        try:
            if self._authenticated(sock):
                sock.settimeout(None)
                while True:
                    header, value = _recv(sock, MAX_KEY + MAX_VALUE * 2 + 4096)
                    reply, out = self._answer(header, value)
                    _send(sock, reply, out)
        except (ConnectionError, OSError, StoreError, ValueError, struct.error):
            pass  # a peer that breaks the protocol or leaves is dropped; the run's ranks time out on their own
        finally:
            with self.server.slots_lock:
                self.server.connections -= 1

    def _authenticated(self, sock: socket.socket) -> bool:
        sock.settimeout(HANDSHAKE_S)
        challenge = secrets.token_bytes(32)
        _send(sock, {"challenge": challenge.hex()})
        header, _ = _recv(sock, 4096)
        good = hmac.compare_digest(str(header.get("proof", "")), _proof(self.server.secret, challenge))
        _send(sock, {"ok": good})
        return good

    def _answer(self, header: dict, value: bytes) -> tuple[dict, bytes]:
        data: _Data = self.server.data
        op, key = header.get("op"), str(header.get("key", ""))
        timeout_s = float(header.get("timeout_s", 300.0))
        try:
            with data.cond:
                if op == "set":
                    data.put(key, value)
                    return {"ok": True}, b""
                if op == "get":
                    if not data.wait_for([key], timeout_s):
                        return {"ok": False, "error": "timeout", "keys": [key]}, b""
                    return {"ok": True}, data.values[key]
                if op == "add":
                    current = int(data.values.get(key, b"0")) + int(header["amount"])
                    data.put(key, str(current).encode())
                    return {"ok": True, "value": current}, b""
                if op == "compare_set":
                    expected = bytes.fromhex(header["expected"])
                    present = data.values.get(key)
                    if (present is None and not expected) or present == expected:
                        data.put(key, value)
                        return {"ok": True}, value
                    return {"ok": True}, expected if present is None else present
                if op == "wait":
                    keys = [str(k) for k in header.get("keys", [])][:MAX_KEYS]
                    if not data.wait_for(keys, timeout_s):
                        return {"ok": False, "error": "timeout", "keys": keys}, b""
                    return {"ok": True}, b""
                if op == "check":
                    keys = [str(k) for k in header.get("keys", [])]
                    return {"ok": True, "value": all(k in data.values for k in keys)}, b""
                if op == "delete":
                    old = data.values.pop(key, None)
                    if old is not None:
                        data.bytes -= len(key) + len(old)
                    return {"ok": True, "value": old is not None}, b""
                if op == "num_keys":
                    return {"ok": True, "value": len(data.values)}, b""
        except StoreError as error:
            return {"ok": False, "error": str(error)}, b""
        return {"ok": False, "error": f"unknown operation {op!r}"}, b""


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: str, secret: str) -> None:
        self.secret, self.data = secret, _Data()
        self.slots_lock, self.connections = threading.Lock(), 0
        super().__init__((addr, 0), _Handler)


class StoreServer:
    """The store for one run, served from a thread of the process that hosts the rendezvous."""

    def __init__(self, listen_addr: str, secret: str) -> None:
        try:
            self._server = _Server(listen_addr, secret)
        except OSError as error:
            raise LaunchError(f"rendezvous: cannot listen on {listen_addr}: {error}") from error
        self.addr, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="rendezvous-store", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _client_base():
    import torch.distributed as tdist

    return tdist.Store


class _Connection:
    """One authenticated connection to the store; a lock keeps its requests and replies paired."""

    def __init__(self, host: str, port: int, secret: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:  # the server may start a moment after a rank (Slurm's batch script starts both)
            try:
                self.sock = socket.create_connection((host, port), timeout=min(10.0, timeout_s))
                break
            except OSError as error:
                if time.monotonic() > deadline:
                    raise StoreError(f"rendezvous store {host}:{port} unreachable: {error}") from error
                time.sleep(0.2)
        header, _ = _recv(self.sock, 4096)
        _send(self.sock, {"proof": _proof(secret, bytes.fromhex(header["challenge"]))})
        reply, _ = _recv(self.sock, 4096)
        if not reply.get("ok"):
            raise StoreError(f"rendezvous store {host}:{port} refused this rank's secret")
        self.sock.settimeout(None)
        self.lock = threading.Lock()

    def call(self, header: dict, value: bytes = b"") -> tuple[dict, bytes]:
        with self.lock:
            _send(self.sock, header, value)
            reply, out = _recv(self.sock, MAX_VALUE * 2 + 4096)
        if not reply.get("ok"):
            if reply.get("error") == "timeout":
                raise StoreError(f"rendezvous store: timed out waiting for {reply.get('keys')}")
            raise StoreError(str(reply.get("error")))
        return reply, out


def connect(host: str, port: int, secret: str, timeout: timedelta = timedelta(seconds=300)):
    """A torch `Store` (usable by init_process_group) on an authenticated connection to the run's store."""

    class AuthenticatedStore(_client_base()):  # type: ignore[misc]
        """torch.distributed.Store over this module's protocol."""

        def __init__(self) -> None:
            super().__init__()
            self._conn = _Connection(host, port, secret, timeout.total_seconds())
            self._timeout_s = timeout.total_seconds()

        def set(self, key, value) -> None:
            self._conn.call({"op": "set", "key": key}, _bytes(value))

        def get(self, key) -> bytes:
            return self._conn.call({"op": "get", "key": key, "timeout_s": self._timeout_s})[1]

        def add(self, key, amount) -> int:
            return int(self._conn.call({"op": "add", "key": key, "amount": int(amount)})[0]["value"])

        def compare_set(self, key, expected, desired) -> bytes:
            return self._conn.call(
                {"op": "compare_set", "key": key, "expected": _bytes(expected).hex()}, _bytes(desired)
            )[1]

        def wait(self, keys, timeout=None) -> None:
            seconds = self._timeout_s if timeout is None else timeout.total_seconds()
            self._conn.call({"op": "wait", "keys": list(keys), "timeout_s": seconds})

        def check(self, keys) -> bool:
            return bool(self._conn.call({"op": "check", "keys": list(keys)})[0]["value"])

        def delete_key(self, key) -> bool:
            return bool(self._conn.call({"op": "delete", "key": key})[0]["value"])

        def num_keys(self) -> int:
            return int(self._conn.call({"op": "num_keys"})[0]["value"])

        def set_timeout(self, timeout) -> None:
            self._timeout_s = timeout.total_seconds()

    return AuthenticatedStore()


def _bytes(value) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
