"""The one place alert backends are chosen from the suite's alert targets."""

from __future__ import annotations

import logging

from bench.config import AlertTargets

log = logging.getLogger(__name__)


class AlertDeliveryError(RuntimeError):
    """One or more alert targets could not be reached; the others were still tried."""


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
    """Every target is tried: a Slack outage must not lose the e-mail. Failures are raised together, after."""
    sent, failed = [], []
    for notifier in notifiers(targets, subject, text):
        name = type(notifier).__name__
        try:
            notifier.notify(context)
        except Exception as error:  # any failure of one target must not stop the next
            log.error("alert via %s (%s) failed: %s", name, notifier.conn_id, error)
            failed.append(f"{name} ({notifier.conn_id}): {type(error).__name__}: {error}")
        else:
            sent.append(name)
    if failed:
        raise AlertDeliveryError(f"sent via {sent or 'nothing'}; failed: " + "; ".join(failed))
    return sent
