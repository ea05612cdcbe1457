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
MAX_CONNECTIONS = 1024  # authenticated: a rank holds one or two
MAX_PENDING = 64  # connections still in the handshake
HANDSHAKE_S = 10.0  # for the whole handshake, not per read
MAX_WAIT_S = 7 * 24 * 3600.0  # a longer wait is clamped (threading refuses huge timeouts)
REPLY_MARGIN_S = 30.0  # a client waits this much longer than the operation's own timeout for its reply
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


def _proof(secret: str, challenge: bytes) -> bytes:
    """A client's answer to a challenge: labelled, so no other use of the secret (Horovod's token) can
    be replayed as one, and compared as bytes (a str with non-ASCII would make compare_digest raise)."""
    return hmac.new(secret.encode(), b"scalewatch store client|" + challenge, hashlib.sha256).hexdigest().encode()


def _send(sock: socket.socket, header: dict, value: bytes = b"") -> None:
    body = json.dumps(header).encode() + b"\0" + value
    sock.sendall(_FRAME.pack(len(body)) + body)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """n bytes; with a deadline, the whole read must end by it (a per-recv timeout alone lets a peer that
    sends a byte every few seconds hold the connection for hours)."""
    chunks, left = [], n
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("rendezvous store: handshake deadline passed")
            sock.settimeout(remaining)
        chunk = sock.recv(min(left, 1 << 16))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, limit: int, deadline: float | None = None) -> tuple[dict, bytes]:
    (size,) = _FRAME.unpack(_recv_exact(sock, _FRAME.size, deadline))
    if size > limit:
        raise StoreError(f"rendezvous store: a frame of {size} bytes is over the {limit}-byte limit")
    body = _recv_exact(sock, size, deadline)
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
        size = len(key.encode())
        grown = self.bytes + size + len(value) - (0 if old is None else size + len(old))
        if (old is None and len(self.values) >= MAX_KEYS) or grown > MAX_BYTES:
            raise StoreError("rendezvous store: full")
        self.values[key], self.bytes = value, grown
        self.cond.notify_all()

    def wait_for(self, keys: list[str], timeout_s: float) -> bool:
        """Whether every key is present within `timeout_s` (0 or less: no timeout, as torch's kNoTimeout)."""
        bounded = None if timeout_s <= 0 else min(timeout_s, MAX_WAIT_S)
        return self.cond.wait_for(lambda: all(k in self.values for k in keys), timeout=bounded)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        """Unauthenticated connections have a cap of their own and a deadline for the whole handshake,
        so peers without the secret cannot crowd out the run's ranks; whatever a peer sends that breaks
        the protocol drops it, silently (no traceback per connection to fill a log)."""
        sock: socket.socket = self.request
        server = self.server
        with server.slots_lock:
            if server.pending >= MAX_PENDING or server.connections >= MAX_CONNECTIONS:
                return
            server.pending += 1
        admitted = False
        try:
            admitted = self._authenticated(sock)
        except Exception:
            pass
        finally:
            with server.slots_lock:
                server.pending -= 1
                server.connections += int(admitted)
        if not admitted:
            return
        try:
            sock.settimeout(None)
            while True:
                header, value = _recv(sock, MAX_KEY + MAX_VALUE * 2 + 4096)
                reply, out = self._answer(header, value)
                _send(sock, reply, out)
        except Exception:
            pass
        finally:
            with server.slots_lock:
                server.connections -= 1

    def _authenticated(self, sock: socket.socket) -> bool:
        deadline = time.monotonic() + HANDSHAKE_S
        challenge = secrets.token_bytes(32)
        sock.settimeout(HANDSHAKE_S)
        _send(sock, {"challenge": challenge.hex()})
        header, _ = _recv(sock, 4096, deadline)
        good = hmac.compare_digest(str(header.get("proof", "")).encode(), _proof(self.server.secret, challenge))
        _send(sock, {"ok": good})
        return good

    def _answer(self, header: dict, value: bytes) -> tuple[dict, bytes]:
        data: _Data = self.server.data
        op, key = header.get("op"), str(header.get("key", ""))
        timeout_s = float(header.get("timeout_s", 300.0))  # 0: none (torch's kNoTimeout)
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
                    try:
                        current = int(data.values.get(key, b"0")) + int(header["amount"])
                    except ValueError:
                        return {"ok": False, "error": f"add: the value of {key!r} is not an integer"}, b""
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
                        data.bytes -= len(key.encode()) + len(old)
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
        self.slots_lock, self.connections, self.pending = threading.Lock(), 0, 0
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
        while True:  # the server may start a moment after a rank, or be busy with other handshakes
            try:
                self.sock = self._handshake(host, port, secret)
                break
            except (OSError, ValueError, KeyError, struct.error) as error:
                if time.monotonic() > deadline:
                    raise StoreError(f"rendezvous store {host}:{port} unreachable: {error}") from error
                time.sleep(0.2)
        self.lock = threading.Lock()

    @staticmethod
    def _handshake(host: str, port: int, secret: str) -> socket.socket:
        sock = socket.create_connection((host, port), timeout=HANDSHAKE_S)
        try:
            deadline = time.monotonic() + HANDSHAKE_S
            header, _ = _recv(sock, 4096, deadline)
            _send(sock, {"proof": _proof(secret, bytes.fromhex(header["challenge"])).decode()})
            reply, _ = _recv(sock, 4096, deadline)
        except BaseException:
            sock.close()
            raise
        if not reply.get("ok"):
            sock.close()
            raise StoreError(f"rendezvous store {host}:{port} refused this rank's secret")
        return sock

    def call(self, header: dict, value: bytes = b"", timeout_s: float = 0.0) -> tuple[dict, bytes]:
        """One request and its reply. The socket waits the operation's timeout and a margin (none for
        an operation without one): a store host gone without a FIN fails the call instead of hanging."""
        with self.lock:
            self.sock.settimeout(timeout_s + REPLY_MARGIN_S if timeout_s > 0 else None)
            _send(self.sock, header, value)
            reply, out = _recv(self.sock, MAX_VALUE * 2 + 4096)
        if not reply.get("ok"):
            if reply.get("error") == "timeout":
                raise _timeout_error(f"rendezvous store: timed out waiting for {reply.get('keys')}")
            raise StoreError(str(reply.get("error")))
        return reply, out


def _timeout_error(message: str) -> Exception:
    """torch's own store timeout type, so torch's timeout handling recognises it."""
    import torch.distributed as tdist

    return getattr(tdist, "DistStoreError", StoreError)(message)


def connect(host: str, port: int, secret: str, timeout: timedelta = timedelta(seconds=300)):
    """A torch `Store` (usable by init_process_group) on an authenticated connection to the run's store."""

    class AuthenticatedStore(_client_base()):  # type: ignore[misc]
        """torch.distributed.Store over this module's protocol."""

        def __init__(self) -> None:
            super().__init__()
            self._conn = _Connection(host, port, secret, timeout.total_seconds())
            self._timeout_s = timeout.total_seconds()

        def _call(self, header: dict, value: bytes = b"", seconds: float | None = None) -> tuple[dict, bytes]:
            return self._conn.call(header, value, self._timeout_s if seconds is None else seconds)

        def set(self, key, value) -> None:
            self._call({"op": "set", "key": key}, _bytes(value))

        def get(self, key) -> bytes:
            return self._call({"op": "get", "key": key, "timeout_s": self._timeout_s})[1]

        def add(self, key, amount) -> int:
            return int(self._call({"op": "add", "key": key, "amount": int(amount)})[0]["value"])

        def compare_set(self, key, expected, desired) -> bytes:
            return self._call({"op": "compare_set", "key": key, "expected": _bytes(expected).hex()}, _bytes(desired))[1]

        def wait(self, keys, timeout=None) -> None:
            seconds = self._timeout_s if timeout is None else timeout.total_seconds()
            self._call({"op": "wait", "keys": list(keys), "timeout_s": seconds}, seconds=seconds)

        def check(self, keys) -> bool:
            return bool(self._call({"op": "check", "keys": list(keys)})[0]["value"])

        def delete_key(self, key) -> bool:
            return bool(self._call({"op": "delete", "key": key})[0]["value"])

        def num_keys(self) -> int:
            return int(self._call({"op": "num_keys"})[0]["value"])

        def set_timeout(self, timeout) -> None:
            self._timeout_s = timeout.total_seconds()

    return AuthenticatedStore()


def _bytes(value) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value)
