"""SMTP over TLS against a real aiosmtpd server with a certificate from a CA made for the test: the
certificate and host name are verified (smtplib's default checks neither); a private CA is trusted only
when the connection names its file."""

from __future__ import annotations

import json
import socket

import pytest

from bench.config.models import AlertTargets
from tests.infra.receivers import SmtpReceiver, make_tls_files

TARGETS = AlertTargets(smtp_conn_id="sw_t_smtp", email_to=("oncall@example.com",))


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("smtp-tls"))


def _smtp(monkeypatch, port: int, host: str = "127.0.0.1", **extra) -> None:
    conn = {
        "conn_type": "smtp",
        "host": host,
        "port": port,
        "login": "alerts",
        "password": "smtpSECRETpw",
        "extra": extra,
    }
    monkeypatch.setenv("AIRFLOW_CONN_SW_T_SMTP", json.dumps(conn))


@pytest.mark.parametrize("tls", ["starttls", "ssl"])
def test_an_untrusted_certificate_is_refused_and_the_private_ca_file_is_trusted(monkeypatch, tls_files, tls):
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    ca, cert, key = tls_files
    with SmtpReceiver(tls=tls, cert=(cert, key)) as smtp:
        _smtp(monkeypatch, smtp.port, **{tls: True})
        with pytest.raises(AlertDeliveryError) as raised:
            send(TARGETS, "s", "ssd @ 2 GPUs failed", {})
        assert smtp.logins == [] and smtp.messages == []  # the password never went to the unverified server
        message = str(raised.value)
        assert (
            "SmtpAlert (sw_t_smtp): SmtpSecurityError: smtp connection sw_t_smtp: the server's certificate" in message
        )
        assert "unable to get local issuer certificate" in message and '"ca_file"' in message
        assert "smtpSECRETpw" not in message

        _smtp(monkeypatch, smtp.port, ca_file=str(ca), **{tls: True})
        assert send(TARGETS, "s", "ssd @ 2 GPUs failed", {}) == ["SmtpAlert"]
    assert smtp.logins == ["alerts"] and "ssd @ 2 GPUs failed" in smtp.messages[0]["data"]


def test_the_host_name_is_verified_too(monkeypatch, tls_files):
    """The CA is trusted but the certificate is for 127.0.0.1, not `localhost`: refused."""
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    ca, cert, key = tls_files
    with SmtpReceiver(tls="starttls", cert=(cert, key)) as smtp:
        _smtp(monkeypatch, smtp.port, host="localhost", starttls=True, ca_file=str(ca))
        with pytest.raises(AlertDeliveryError, match=r"smtp connection sw_t_smtp: the server's certificate .*mismatch"):
            send(TARGETS, "s", "t", {})
    assert smtp.logins == [] and smtp.messages == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("ca_file", "tls", "expected"),
    [
        ("ca.pem", True, r'extra "ca_file" must be an absolute path'),
        ("/nonexistent/ca.pem", True, r'extra "ca_file" /nonexistent/ca.pem is not a readable file'),
        ("NOT_PEM", True, r'extra "ca_file" .* holds no usable PEM certificate'),
        ("CA", False, r'extra "ca_file" needs "starttls" or "ssl" true'),
    ],
)
def test_the_ca_file_setting_is_validated_naming_the_connection(
    monkeypatch, tmp_path, tls_files, ca_file, tls, expected
):
    from scalewatch.notifiers.registry import AlertDeliveryError, send

    if ca_file == "NOT_PEM":
        (tmp_path / "notes.txt").write_text("not a certificate\n")
        ca_file = str(tmp_path / "notes.txt")
    elif ca_file == "CA":
        ca_file = str(tls_files[0])
    extra = {"ca_file": ca_file, "starttls": True} if tls else {"ca_file": ca_file, "allow_plaintext_login": True}
    _smtp(monkeypatch, _closed_port(), **extra)
    with pytest.raises(AlertDeliveryError, match=r"ConfigError: smtp connection sw_t_smtp: " + expected):
        send(TARGETS, "s", "t", {})
