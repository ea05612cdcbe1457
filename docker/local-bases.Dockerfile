# Stand-ins for the official bases, built from Debian packages where no image registry answers
# (scripts/stack.sh builds them when the official images cannot be pulled). DEBIAN: a Debian 12 image
# with python3 and python3-venv; stack.sh makes `localhost/scalewatch-debian:bookworm` with
# debootstrap and `podman import`. Only what docker/airflow.Dockerfile and docker/compose.yaml use of
# the official images is reproduced here.
ARG DEBIAN=localhost/scalewatch-debian:bookworm

# apache/airflow:3.3.2-python3.11 as airflow.Dockerfile uses it: user airflow (uid 50000, group 0),
# Python at /usr/local/bin/python (a venv the user airflow installs into), and an entrypoint that runs
# `airflow ARGS` unless the command is a shell or python.
FROM ${DEBIAN} AS airflow-base
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /usr/local \
 && useradd --uid 50000 --gid 0 --create-home --home-dir /home/airflow airflow \
 && mkdir -p /opt/airflow && chown -R airflow:root /usr/local /opt/airflow \
 && printf '%s\n' '#!/bin/sh' 'case "${1:-}" in bash|sh|python|python3|"") exec "$@";; esac' \
      'exec /usr/local/bin/airflow "$@"' > /entrypoint && chmod 755 /entrypoint
ENV AIRFLOW_HOME=/opt/airflow PATH=/usr/local/bin:/usr/bin:/bin
USER airflow
WORKDIR /opt/airflow
ENTRYPOINT ["/entrypoint"]

# postgres:16 as docker/compose.yaml uses it (Debian 12's PostgreSQL 15): POSTGRES_USER, POSTGRES_PASSWORD,
# POSTGRES_DB at the first start, *.sql in /docker-entrypoint-initdb.d, data in /var/lib/postgresql/data.
FROM ${DEBIAN} AS postgres
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql /docker-entrypoint-initdb.d \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY docker/local-postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PGDATA=/var/lib/postgresql/data
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
