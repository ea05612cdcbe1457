#!/bin/sh
# The stack's PostgreSQL roles, made or put right at every start (docker/compose.yaml's one-shot service
# `postgres-roles`, after the server is healthy and before Airflow's migration), each with what it needs alone:
#   postgres    the superuser; its password (POSTGRES_PASSWORD) is in this container and the server's, nowhere else
#   airflow     Airflow's metadata: owns the database airflow (AIRFLOW_DB_PASSWORD)
#   scalewatch  the results store: owns the database scalewatch (SCALEWATCH_RESULTS_PASSWORD); the only database
#               credential a task's environment carries (AIRFLOW_CONN_SCALEWATCH_RESULTS)
# Neither of the two is a superuser or may create databases or roles; CONNECT on every database is revoked from
# PUBLIC, so neither can open the other's (the results role cannot read Airflow's metadata, connections included).
# A volume made before this split (its superuser was `airflow`, owning both databases and every table): the
# superuser is renamed postgres (its password kept), and what it owned in each database passes to that database's
# role. Metadata and history are kept. Passwords go to psql through the environment (\getenv), never argv.
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" "${AIRFLOW_DB_PASSWORD:?set AIRFLOW_DB_PASSWORD}"
: "${SCALEWATCH_RESULTS_PASSWORD:?set SCALEWATCH_RESULTS_PASSWORD}"
export PGHOST="${PGHOST:-postgres}" PGCONNECT_TIMEOUT=10 PGDATABASE=postgres

# psql as ROLE with PASSWORD (the environment: not in any process list), any further psql arguments after them
as() {
  role=$1 password=$2
  shift 2
  PGUSER=$role PGPASSWORD=$password psql -X -q -t -A -v ON_ERROR_STOP=1 "$@"
}

# --- a volume of before: its superuser was airflow ---------------------------------------------------------------
if ! as postgres "$POSTGRES_PASSWORD" -c 'SELECT 1' >/dev/null 2>&1; then
  bootstrap=$(as airflow "$POSTGRES_PASSWORD" -c 'SELECT rolname FROM pg_roles WHERE oid = 10 AND rolsuper') ||
    { echo "postgres-roles: neither postgres nor airflow logs in with POSTGRES_PASSWORD (docker/README.md)" >&2; exit 1; }
  [ "$bootstrap" = airflow ] || { echo "postgres-roles: unexpected superuser '$bootstrap'" >&2; exit 1; }
  echo "postgres-roles: the superuser airflow of an earlier volume becomes postgres"
  # a session cannot rename its own role: a second superuser does it, for this moment only
  SCALEWATCH_MIGRATE_PASSWORD=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  export SCALEWATCH_MIGRATE_PASSWORD
  as airflow "$POSTGRES_PASSWORD" <<'SQL'
\getenv migrate_pw SCALEWATCH_MIGRATE_PASSWORD
SET client_min_messages = warning;
DROP ROLE IF EXISTS scalewatch_migrate;
CREATE ROLE scalewatch_migrate SUPERUSER LOGIN PASSWORD :'migrate_pw';
SQL
  as scalewatch_migrate "$SCALEWATCH_MIGRATE_PASSWORD" -c 'ALTER ROLE airflow RENAME TO postgres'
  as postgres "$POSTGRES_PASSWORD" -c 'DROP ROLE scalewatch_migrate'
  unset SCALEWATCH_MIGRATE_PASSWORD
fi

# --- the two roles and their databases ----------------------------------------------------------------------------
as postgres "$POSTGRES_PASSWORD" <<'SQL'
\getenv airflow_pw AIRFLOW_DB_PASSWORD
\getenv results_pw SCALEWATCH_RESULTS_PASSWORD
SELECT 'CREATE ROLE airflow' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'airflow') \gexec
SELECT 'CREATE ROLE scalewatch' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'scalewatch') \gexec
ALTER ROLE airflow WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'airflow_pw';
ALTER ROLE scalewatch WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'results_pw';
SELECT 'CREATE DATABASE airflow OWNER airflow' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'airflow') \gexec
SELECT 'CREATE DATABASE scalewatch OWNER scalewatch'
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'scalewatch') \gexec
ALTER DATABASE airflow OWNER TO airflow;
ALTER DATABASE scalewatch OWNER TO scalewatch;
REVOKE ALL ON DATABASE airflow, scalewatch, postgres FROM PUBLIC;
SQL

# What the superuser owns in a database (an earlier volume's tables, sequences, views, types, functions, schemas)
# passes to the database's role; nothing to do on a volume made since.
for pair in airflow:airflow scalewatch:scalewatch; do
  as postgres "$POSTGRES_PASSWORD" -d "${pair%%:*}" -v owner="${pair#*:}" <<'SQL'
SELECT set_config('scalewatch.owner', :'owner', false) \g /dev/null
DO $$
DECLARE
  owner text := current_setting('scalewatch.owner');
  item record;
BEGIN
  FOR item IN
    SELECT format('ALTER %s %s OWNER TO %I', CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
             WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, c.oid::regclass, owner) AS sql
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relowner = 10 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
      -- a sequence of a table's column moves with its table
      AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
               AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
    UNION ALL
    SELECT format('ALTER TYPE %s OWNER TO %I', t.oid::regtype, owner)
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE t.typowner = 10 AND t.typtype IN ('e', 'd', 'r', 'm')
      AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
    UNION ALL
    SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, owner)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE p.proowner = 10 AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
    UNION ALL
    SELECT format('ALTER SCHEMA %I OWNER TO %I', n.nspname, owner)
    FROM pg_namespace n
    WHERE n.nspowner = 10 AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'public')
      AND n.nspname NOT LIKE 'pg\_%'
  LOOP
    EXECUTE item.sql;
  END LOOP;
END
$$;
SQL
done
echo "postgres-roles: airflow owns the database airflow, scalewatch the database scalewatch; neither is a superuser"
