"""The one place alert backends are chosen from the suite's alert targets, and messages delivered to them
target by target: one target's failure never stops another's delivery, and every failure is raised
together at the end (the task fails and Airflow retries it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from bench.config.models import AlertTargets

log = logging.getLogger(__name__)


class AlertDeliveryError(RuntimeError):
    """One or more alert targets could not be reached; the others were still tried."""


@dataclass(frozen=True)
class Target:
    """One alert target. `name` is what a delivery to it is recorded under: the same for every try of a
    run's alert task ("slack:<conn_id>", "smtp:<conn_id>:<recipients>")."""

    name: str
    kind: str  # the notifier's class name, as errors and the task's return value name it
    conn_id: str
    build: Callable[[str, str], object]  # (subject, text) -> a notifier with notify(context)


def targets(alerts: AlertTargets) -> list[Target]:
    from scalewatch.notifiers.slack import SlackWebhookAlert
    from scalewatch.notifiers.smtp_mail import SmtpAlert

    out: list[Target] = []
    if alerts.slack_conn_id:
        slack = alerts.slack_conn_id
        out.append(Target(f"slack:{slack}", "SlackWebhookAlert", slack, lambda _s, t: SlackWebhookAlert(slack, t)))
    if alerts.smtp_conn_id and alerts.email_to:
        smtp, to = alerts.smtp_conn_id, list(alerts.email_to)
        out.append(
            Target(f"smtp:{smtp}:{','.join(sorted(to))}", "SmtpAlert", smtp, lambda s, t: SmtpAlert(smtp, to, s, t))
        )
    return out


def notifiers(alerts: AlertTargets, subject: str, text: str) -> list:
    return [t.build(subject, text) for t in targets(alerts)]


class Deliveries:
    """Messages delivered one (target, message) at a time, each on its own; what went and what failed."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.failed: list[str] = []

    def attempt(self, target: Target, subject: str, text: str, context) -> bool:
        """Deliver one message to one target; a failure is kept for `raise_failures`, never raised here."""
        try:
            target.build(subject, text).notify(context)
        except Exception as error:  # any failure of one target must not stop the next
            log.error("alert via %s (%s) failed: %s", target.kind, target.conn_id, error)
            self.failed.append(f"{target.kind} ({target.conn_id}): {type(error).__name__}: {error}")
            return False
        self.sent.append(target.kind)
        return True

    def fail(self, what: str, error: Exception) -> None:
        """A failure around the deliveries (recording one): it fails the task too."""
        log.error("%s failed: %s", what, error)
        self.failed.append(f"{what}: {type(error).__name__}: {error}")

    def raise_failures(self) -> None:
        if self.failed:
            raise AlertDeliveryError(f"sent via {self.sent or 'nothing'}; failed: " + "; ".join(self.failed))


def send(alerts: AlertTargets, subject: str, text: str, context) -> list[str]:
    """Every target is tried: a Slack outage must not lose the e-mail. Failures are raised together, after."""
    deliveries = Deliveries()
    for target in targets(alerts):
        deliveries.attempt(target, subject, text, context)
    deliveries.raise_failures()
    return deliveries.sent
