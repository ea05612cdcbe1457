"""E-mail over SMTP. Connection: host, port, login/password (optional), extra {"from", "starttls", "ssl",
"ca_file", "allow_plaintext_login"}: a password is only sent over TLS unless the connection explicitly
allows otherwise. TLS always verifies the server's certificate and host name (`ssl.create_default_context`:
smtplib's own default checks neither); "ca_file" names a PEM file of a private CA to trust instead of the
system's. One message is bounded as a whole (`SMTP_DEADLINE_S`), not per socket read."""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage
from pathlib import Path

from airflow.sdk import BaseNotifier

from bench.errors import ConfigError
from scalewatch.notifiers import SMTP_DEADLINE_S
from scalewatch.notifiers.deadline import Deadline, within


class SmtpSecurityError(RuntimeError):
    """The connection would send credentials in clear text, or the server's certificate is not trusted."""


def tls_context(conn_id: str, extra: dict) -> ssl.SSLContext:
    """Verifying context; with extra "ca_file", that CA only. Errors name the connection and the field."""
    ca_file = extra.get("ca_file")
    if ca_file is None:
        return ssl.create_default_context()
    if not isinstance(ca_file, str) or not Path(ca_file).is_absolute():
        raise ConfigError(f'smtp connection {conn_id}: extra "ca_file" must be an absolute path to a PEM file')
    if not Path(ca_file).is_file():
        raise ConfigError(f'smtp connection {conn_id}: extra "ca_file" {ca_file} is not a readable file')
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError, ValueError) as error:
        raise ConfigError(
            f'smtp connection {conn_id}: extra "ca_file" {ca_file} holds no usable PEM certificate ({error})'
        ) from None


class _Tracked:
    """SMTP whose socket (the TLS one after STARTTLS) is cut when the delivery's deadline passes."""

    def __init__(self, deadline: Deadline, **kwargs) -> None:
        deadline.track(lambda: getattr(self, "sock", None))
        super().__init__(timeout=deadline.remaining(), **kwargs)  # type: ignore[call-arg]


class _SMTP(_Tracked, smtplib.SMTP):
    pass


class _SMTP_SSL(_Tracked, smtplib.SMTP_SSL):
    pass


class SmtpAlert(BaseNotifier):
    template_fields = ("text", "subject")

    def __init__(self, conn_id: str, to: list[str], subject: str = "", text: str = "") -> None:
        super().__init__()
        self.conn_id, self.to, self.subject, self.text = conn_id, list(to), subject, text

    def notify(self, context) -> None:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(self.conn_id)  # here, not in the worker thread: the SDK's channel
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
        if "ca_file" in extra and not (use_ssl or starttls):
            raise ConfigError(f'smtp connection {self.conn_id}: extra "ca_file" needs "starttls" or "ssl" true')
        context_tls = tls_context(self.conn_id, extra) if (use_ssl or starttls) else None
        host, port = conn.host or "localhost", conn.port or (465 if use_ssl else 25)

        def deliver(deadline: Deadline) -> None:
            # connects here: the host given to the constructor is the one TLS verifies the name of
            smtp = (
                _SMTP_SSL(deadline, host=host, port=port, context=context_tls)
                if use_ssl
                else _SMTP(deadline, host=host, port=port)
            )
            with smtp:
                if starttls and not use_ssl:
                    smtp.starttls(context=context_tls)
                if conn.login:
                    smtp.login(conn.login, conn.password or "")
                smtp.send_message(msg)

        try:
            within(SMTP_DEADLINE_S, f"smtp connection {self.conn_id}", deliver)
        except ssl.SSLCertVerificationError as error:
            raise SmtpSecurityError(
                f"smtp connection {self.conn_id}: the server's certificate was not accepted "
                f'({error.verify_message}); if a private CA signed it, name its PEM file in extra "ca_file"'
            ) from None
