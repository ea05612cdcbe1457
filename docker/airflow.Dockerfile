# Airflow 3 with scalewatch's DAG, plugins and the bench library (orchestration + analysis side).
# Build from the repository root: docker build -f docker/airflow.Dockerfile -t scalewatch-airflow .
# AIRFLOW_BASE: the official image by default; scripts/stack.sh passes a stand-in built from Debian
# packages (docker/local-bases.Dockerfile, target airflow-base) where no image registry answers. Both
# run Python as /usr/local/bin/python: the ssh launcher runs the worker's interpreter path on the nodes
# (bench/launch/python.py), and the training image answers at that path (docker/training.Dockerfile).
ARG AIRFLOW_BASE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_BASE}

USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client slurm-client munge fio \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /opt/scalewatch-home /opt/airflow/auth /shared \
 && chown airflow:root /opt/scalewatch-home /opt/airflow/auth /shared
USER airflow

COPY --chown=airflow:root requirements-airflow.txt requirements-nodeps.txt /opt/scalewatch/
RUN pip install --no-cache-dir "apache-airflow[postgres]==3.3.2" -r /opt/scalewatch/requirements-airflow.txt \
 && pip install --no-cache-dir --no-deps -r /opt/scalewatch/requirements-nodeps.txt

# The project as a team installs it: the package (bench, and scalewatch from plugins/), whose plugin Airflow
# finds through the `airflow.plugins` entry point; no plugins folder, nothing on PYTHONPATH.
COPY --chown=airflow:root pyproject.toml /opt/scalewatch/
COPY --chown=airflow:root bench /opt/scalewatch/bench
COPY --chown=airflow:root plugins /opt/scalewatch/plugins
RUN pip install --no-cache-dir --no-deps /opt/scalewatch

# The DAG files: each is the package's one documented line (scalewatch.dags); suite files come from
# SCALEWATCH_SUITES (docker/compose.yaml mounts docker/suites).
COPY --chown=airflow:root dags /opt/airflow/dags
# Task logs: their own volume (docker/compose.yaml `airflow-logs`), mounted by the Airflow services alone,
# never by the compute nodes, whose root must not forge or redirect what the worker writes and the UI shows.
USER root
RUN mkdir -p /opt/airflow/task-logs && chown airflow:root /opt/airflow/task-logs
USER airflow
ENV AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    SCALEWATCH_HOME=/opt/scalewatch-home
