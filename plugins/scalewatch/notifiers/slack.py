"""Slack incoming webhook. Connection: host = base URL (https://hooks.slack.com), password = path/token.

The path is the secret: errors name the connection id and the field to fix, never the URL. One
request is bounded as a whole (`WEBHOOK_DEADLINE_S`), not per socket read.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request

from airflow.sdk import BaseNotifier

from bench.errors import ConfigError
from scalewatch.notifiers import WEBHOOK_DEADLINE_S
from scalewatch.notifiers.deadline import Deadline, DeliveryTimeout, within


class WebhookError(RuntimeError):
    """The webhook was not delivered; the message names the connection, never its URL or token."""


def slack_escape(text: str) -> str:
    """Slack reads <...> as links and mentions (<!channel> pings everyone): our text is plain text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_url(conn, conn_id: str) -> str:
    """The full URL, validated here so that no library's error message ever repeats it (token included)."""
    base = (conn.host or "").rstrip("/")
    if conn.schema and "://" not in base:
        base = f"{conn.schema}://{base}"
    if conn.port:
        base = f"{base}:{conn.port}"
    token = (conn.password or "").lstrip("/")
    url = f"{base}/{token}" if token else base
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a port that is not a number in 0..65535
    except ValueError:  # its text repeats part of the URL: never passed on
        raise ConfigError(
            f"slack connection {conn_id}: host/port do not form a URL (a bad port or IPv6 bracket)"
        ) from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError(
            f"slack connection {conn_id}: host must be a URL starting with https:// (or http://), "
            "e.g. https://hooks.slack.com, with the webhook path in the password"
        )
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ConfigError(f"slack connection {conn_id}: host/password contain whitespace or control characters")
    return url


def redact(message: str, secrets: list[str]) -> str:
    """Each secret (and the URL holding it) replaced, longest first, in text from a library's error."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


class _TrackingOpener(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's own HTTP(S) handling (proxies, redirects), every connection registered with the deadline."""

    def __init__(self, deadline: Deadline) -> None:
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self, context=ssl.create_default_context())
        self._deadline = deadline

    def do_open(self, http_class, req, **http_conn_args):
        def tracked(host, **kwargs):
            connection = http_class(host, **kwargs)
            self._deadline.track(lambda: connection.sock)
            return connection

        return super().do_open(tracked, req, **http_conn_args)


def post_json(url: str, payload: dict, deadline: Deadline) -> int:
    opener = urllib.request.build_opener(_TrackingOpener(deadline))
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with opener.open(request, timeout=deadline.remaining()) as response:
        return response.status


class SlackWebhookAlert(BaseNotifier):
    template_fields = ("text",)

    def __init__(self, conn_id: str, text: str = "") -> None:
        super().__init__()
        self.conn_id, self.text = conn_id, text

    def notify(self, context) -> None:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(self.conn_id)  # here, not in the worker thread: the SDK's channel
        url = webhook_url(conn, self.conn_id)
        secrets = [url, conn.password or "", urllib.parse.urlsplit(url).path]
        what = f"slack webhook ({self.conn_id})"
        try:
            status = within(
                WEBHOOK_DEADLINE_S,
                what,
                lambda deadline: post_json(url, {"text": slack_escape(self.text)}, deadline),
            )
        except DeliveryTimeout:
            raise
        except urllib.error.HTTPError as error:
            raise WebhookError(f"{what} answered HTTP {error.code}") from None
        except urllib.error.URLError as error:
            raise WebhookError(f"{what} could not be reached: {redact(str(error.reason), secrets)}") from None
        except Exception as error:  # a library's text may hold the URL: only its redacted form leaves here
            raise WebhookError(f"{what}: {type(error).__name__}: {redact(str(error), secrets)}") from None
        if status >= 300:
            raise WebhookError(f"{what} answered HTTP {status}")
