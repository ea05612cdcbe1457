"""Slack incoming webhook. Connection: host = base URL (https://hooks.slack.com), password = path/token."""

from __future__ import annotations

import json
import urllib.request

from airflow.sdk import BaseNotifier


def slack_escape(text: str) -> str:
    """Slack reads <...> as links and mentions (<!channel> pings everyone): our text is plain text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook_url(conn) -> str:
    base = (conn.host or "").rstrip("/")
    if conn.schema and "://" not in base:
        base = f"{conn.schema}://{base}"
    if conn.port:
        base = f"{base}:{conn.port}"
    token = (conn.password or "").lstrip("/")
    return f"{base}/{token}" if token else base


class SlackWebhookAlert(BaseNotifier):
    template_fields = ("text",)

    def __init__(self, conn_id: str, text: str = "") -> None:
        super().__init__()
        self.conn_id, self.text = conn_id, text

    def notify(self, context) -> None:
        from airflow.sdk import BaseHook

        url = webhook_url(BaseHook.get_connection(self.conn_id))
        request = urllib.request.Request(
            url,
            data=json.dumps({"text": slack_escape(self.text)}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status >= 300:
                raise RuntimeError(f"slack webhook ({self.conn_id}) answered HTTP {response.status}")
