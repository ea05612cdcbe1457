"""E-mail over SMTP. Connection: host, port, login/password (optional), extra {"from", "starttls", "ssl",
"allow_plaintext_login"}: a password is only sent over TLS unless the connection explicitly allows otherwise."""

from __future__ import annotations

import smtplib
from email.message import EmailMessage

from airflow.sdk import BaseNotifier


class SmtpAlert(BaseNotifier):
    template_fields = ("text", "subject")

    def __init__(self, conn_id: str, to: list[str], subject: str = "", text: str = "") -> None:
        super().__init__()
        self.conn_id, self.to, self.subject, self.text = conn_id, list(to), subject, text

    def notify(self, context) -> None:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(self.conn_id)
        extra = conn.extra_dejson
        msg = EmailMessage()
        msg["From"] = extra.get("from", f"scalewatch@{conn.host or 'localhost'}")
        msg["To"] = ", ".join(self.to)
        msg["Subject"] = self.subject
        msg.set_content(self.text)
        use_ssl, starttls = bool(extra.get("ssl")), bool(extra.get("starttls"))
        if conn.login and not (use_ssl or starttls or extra.get("allow_plaintext_login")):
            raise SmtpSecurityError(
                f"smtp connection {self.conn_id}: refusing to send the password without TLS; set extra "
                '"starttls": true or "ssl": true (or "allow_plaintext_login": true for a trusted local relay)'
            )
        smtp_class = smtplib.SMTP_SSL if use_ssl else smtplib.SMTP
        with smtp_class(conn.host or "localhost", conn.port or (465 if use_ssl else 25), timeout=30) as smtp:
            if starttls and not use_ssl:
                smtp.starttls()
            if conn.login:
                smtp.login(conn.login, conn.password or "")
            smtp.send_message(msg)


class SmtpSecurityError(RuntimeError):
    """The connection would send credentials in clear text."""
