"""The embedded default suite: the weekly scaling regression on this Airflow's own settings.

Suite files (one per cluster or storage system) become DAGs of their own in `dags/suites.py`.
"""

from __future__ import annotations

import os

from bench.config import EMBEDDED_DEFAULT
from scalewatch.dag_factory import build
from scalewatch.params import params

SCHEDULE = os.environ.get("SCALEWATCH_SCHEDULE", "0 3 * * 1")  # cron; "none" turns the schedule off

scaling_regression = build(
    "scaling_regression",
    None if SCHEDULE.lower() in ("", "none") else SCHEDULE,
    params(EMBEDDED_DEFAULT),
    __doc__ or "",
)
