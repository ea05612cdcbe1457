"""Real alert receivers: an HTTP server standing in for Slack's webhook endpoint, and an SMTP server."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookReceiver:
    def __init__(self) -> None:
        self.posts: list[dict] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append({"path": self.path, "json": json.loads(body)})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()


class SmtpReceiver:
    def __init__(self) -> None:
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

            ok = isinstance(auth_data, LoginPassword) and auth_data.password == b"smtpSECRETpw"
            if ok:
                logins.append(auth_data.login.decode())
            return AuthResult(success=ok)

        self.controller = Controller(
            Handler(),
            hostname="127.0.0.1",
            port=self.port,
            authenticator=authenticator,
            auth_require_tls=False,
        )

    def __enter__(self) -> SmtpReceiver:
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()
