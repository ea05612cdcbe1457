"""One Airflow DAG per suite file (`$SCALEWATCH_SUITES/NAME.yaml` -> `scaling_regression__NAME`), built by
scalewatch.dags at every parse; an invalid file is an import error naming it, the other suites still load."""

from scalewatch.dags import declare_suites

declare_suites(globals())
