"""E-mail over SMTP. Connection: host, port, login/password (optional), extra {"from", "starttls"}."""

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
        with smtplib.SMTP(conn.host or "localhost", conn.port or 25, timeout=30) as smtp:
            if extra.get("starttls"):
                smtp.starttls()
            if conn.login:
                smtp.login(conn.login, conn.password or "")
            smtp.send_message(msg)
