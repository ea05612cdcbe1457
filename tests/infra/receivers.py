"""Real alert receivers: an HTTP server standing in for Slack's webhook endpoint, and an SMTP server
(plain, STARTTLS or implicit TLS with a certificate from a CA made for the test)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import select
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SMTP_PASSWORD = "smtpSECRETpw"  # the only password SmtpReceiver accepts


def alert_connections(webhook_port: int, smtp_port: int, token: str) -> dict[str, str]:
    """AIRFLOW_CONN_SW_SLACK and AIRFLOW_CONN_SW_SMTP as a suite's `slack_conn_id: sw_slack` and
    `smtp_conn_id: sw_smtp` reach these receivers (set them with monkeypatch.setenv)."""
    slack = {"conn_type": "http", "host": f"http://127.0.0.1:{webhook_port}", "password": token}
    mail = {
        "conn_type": "smtp",
        "host": "127.0.0.1",
        "port": smtp_port,
        "login": "alerts",
        "password": SMTP_PASSWORD,
        "extra": {"allow_plaintext_login": True},  # the loopback test relay has no TLS
    }
    return {"AIRFLOW_CONN_SW_SLACK": json.dumps(slack), "AIRFLOW_CONN_SW_SMTP": json.dumps(mail)}


class WebhookReceiver:
    """`trickle_s`: answer one byte every that many seconds (for at most `trickle_for_s`), as a stuck
    proxy or a hostile endpoint does. `hung_up` records, for each trickle the client left, how many bytes
    of the answer it had been sent by then (under `len(TRICKLED)`: it never read the answer whole), and
    `left` is set when that happens: the receiver sees the client's end of the connection close (EOF)
    while it waits to send the next byte, so a wait on `left` ends as the client's socket is cut."""

    TRICKLED = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    def __init__(self, trickle_s: float | None = None, trickle_for_s: float = 90.0) -> None:
        self.posts: list[dict] = []
        self.hung_up: list[int] = []
        self.left = threading.Event()
        received, hung_up, left, answer = self.posts, self.hung_up, self.left, self.TRICKLED
        self._stop = stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "json": json.loads(body)})
                if trickle_s is None:
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"ok")
                    return
                end = time.monotonic() + trickle_for_s
                for sent, byte in enumerate(answer):
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:  # the client hung up
                        return self._left(sent)
                    # until the next byte is due: the client's side closing reads as EOF at once
                    readable, _, _ = select.select([self.connection], [], [], trickle_s)
                    if readable and not self._peek():
                        return self._left(sent + 1)
                    if stop.is_set() or time.monotonic() > end:
                        return

            def _peek(self) -> bytes:
                try:
                    return self.connection.recv(1, socket.MSG_PEEK)
                except OSError:  # reset by the client: it left too
                    return b""

            def _left(self, sent: int) -> None:
                hung_up.append(sent)
                left.set()

            def log_message(self, *args):
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.server.shutdown()


def make_tls_files(folder: Path, ip: str = "127.0.0.1") -> tuple[Path, Path, Path]:
    """A private CA and a server certificate it signed for `ip`: (ca.pem, server.pem, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scalewatch test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def plain_text(raw: bytes) -> str:
    """The text/plain body of a message as a reader sees it: transfer encoding (quoted-printable soft
    line breaks, base64) undone."""
    import email
    from email import policy

    body = email.message_from_bytes(raw, policy=policy.default).get_body(preferencelist=("plain",))
    return body.get_content() if body is not None else ""


class SmtpReceiver:
    """`tls`: None (plain), "starttls" (offered, required before AUTH) or "ssl" (TLS from the first byte),
    with the server certificate and key from `make_tls_files`."""

    def __init__(self, tls: str | None = None, cert: tuple[Path, Path] | None = None) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[dict] = []
        messages = self.messages

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                messages.append(
                    {
                        "from": envelope.mail_from,
                        "to": envelope.rcpt_tos,
                        "data": envelope.content.decode(errors="replace"),
                        "text": plain_text(envelope.content),  # as a mail reader shows it (decoded)
                    }
                )
                return "250 OK"

        with socket.socket() as s:  # aiosmtpd probes its own port, so it cannot be 0
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.logins: list[str] = []
        logins = self.logins

        def authenticator(server, session, envelope, mechanism, auth_data):
            from aiosmtpd.smtp import AuthResult, LoginPassword

            ok = isinstance(auth_data, LoginPassword) and auth_data.password == SMTP_PASSWORD.encode()
            if ok:
                logins.append(auth_data.login.decode())
            return AuthResult(success=ok)

        server_tls: dict = {}
        if tls is not None:
            assert tls in ("starttls", "ssl") and cert is not None, "tls needs a certificate and key"
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*cert)
            server_tls = {"tls_context": context} if tls == "starttls" else {"ssl_context": context}
        self.controller = Controller(
            Handler(),
            hostname="127.0.0.1",
            port=self.port,
            authenticator=authenticator,
            auth_require_tls=tls == "starttls",
            **server_tls,
        )

    def __enter__(self) -> SmtpReceiver:
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()
