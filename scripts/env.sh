# Sourced by the scripts: one Airflow + scalewatch environment rooted in the checkout.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export SCALEWATCH_HOME=${SCALEWATCH_HOME:-$ROOT/scalewatch-home}
export AIRFLOW_HOME=${AIRFLOW_HOME:-$SCALEWATCH_HOME/airflow}
export AIRFLOW__CORE__DAGS_FOLDER=$ROOT/dags
export AIRFLOW__CORE__PLUGINS_FOLDER=$ROOT/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__PARALLELISM=${AIRFLOW__CORE__PARALLELISM:-4}
export PYTHONPATH=$ROOT/plugins${PYTHONPATH:+:$PYTHONPATH}
export PATH=$ROOT/.venv/bin:$PATH
