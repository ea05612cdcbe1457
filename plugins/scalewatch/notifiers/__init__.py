"""Alert backends, one module each; `registry.py` names them.

Every delivery has a total deadline (connect, send and every read together), so a receiver that
trickles its answer cannot hold the `alert` task; the task's own `execution_timeout` is larger than
every deadline it can spend, so a hung alert cannot block next week's run (`max_active_runs=1`).
"""

from __future__ import annotations

from datetime import timedelta

WEBHOOK_DEADLINE_S = 20.0  # a Slack webhook answers in well under a second; 20 s is an outage
SMTP_DEADLINE_S = 60.0  # greeting, STARTTLS, AUTH and DATA of one message through a slow relay
SENDS_PER_ALERT_TASK = 2  # `suite.send_alerts`: the verdict, then the change points; each tries every target
ALERT_TASK_TIMEOUT = timedelta(
    seconds=SENDS_PER_ALERT_TASK * (WEBHOOK_DEADLINE_S + SMTP_DEADLINE_S) + 120  # + connection lookups, text
)
