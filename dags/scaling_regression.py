"""The embedded default suite as an Airflow DAG: the weekly scaling regression (cron `0 3 * * 1`, SCALEWATCH_SCHEDULE
overrides), built by scalewatch.dags, which an installed package's DAG file calls the same way."""

from scalewatch.dags import declare_embedded

declare_embedded(globals())
