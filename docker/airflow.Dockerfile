# Airflow 3 with scalewatch's DAG, plugins and the bench library (orchestration + analysis side).
# Build from the repository root: docker build -f docker/airflow.Dockerfile -t scalewatch-airflow .
FROM apache/airflow:3.3.2-python3.11

USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client slurm-client munge fio \
 && rm -rf /var/lib/apt/lists/*
USER airflow

COPY --chown=airflow:root requirements-airflow.txt requirements-nodeps.txt /opt/scalewatch/
RUN pip install --no-cache-dir "apache-airflow==3.3.2" -r /opt/scalewatch/requirements-airflow.txt \
 && pip install --no-cache-dir --no-deps -r /opt/scalewatch/requirements-nodeps.txt

COPY --chown=airflow:root pyproject.toml /opt/scalewatch/
COPY --chown=airflow:root bench /opt/scalewatch/bench
RUN pip install --no-cache-dir --no-deps /opt/scalewatch

COPY --chown=airflow:root dags /opt/airflow/dags
COPY --chown=airflow:root plugins /opt/airflow/plugins
ENV PYTHONPATH=/opt/airflow/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    SCALEWATCH_HOME=/opt/scalewatch-home
