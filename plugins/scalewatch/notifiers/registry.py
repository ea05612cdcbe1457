"""The one place alert backends are chosen from the suite's alert targets."""

from __future__ import annotations

from bench.config import AlertTargets


def notifiers(targets: AlertTargets, subject: str, text: str) -> list:
    from scalewatch.notifiers.slack import SlackWebhookAlert
    from scalewatch.notifiers.smtp_mail import SmtpAlert

    out: list = []
    if targets.slack_conn_id:
        out.append(SlackWebhookAlert(targets.slack_conn_id, text))
    if targets.smtp_conn_id and targets.email_to:
        out.append(SmtpAlert(targets.smtp_conn_id, list(targets.email_to), subject, text))
    return out


def send(targets: AlertTargets, subject: str, text: str, context) -> list[str]:
    sent = []
    for notifier in notifiers(targets, subject, text):
        notifier.notify(context)
        sent.append(type(notifier).__name__)
    return sent
