"""The embedded default suite: the weekly scaling regression on this Airflow's own settings.

Suite files (one per cluster or storage system) become DAGs of their own in `dags/suites.py`.
"""

from __future__ import annotations

import os

from scalewatch.dag_factory import build
from scalewatch.params import params

SCHEDULE = os.environ.get("SCALEWATCH_SCHEDULE", "0 3 * * 1")  # cron; "none" turns the schedule off

# The embedded default confirms no cause by rerunning: on two cores one failing workload's four reruns
# add about 80 s to a four-minute run (docs/benchmarks.md); suites and the form turn it on.
scaling_regression = build(
    "scaling_regression",
    None if SCHEDULE.lower() in ("", "none") else SCHEDULE,
    params({"confirm_causes": False}),
    __doc__ or "",
)
