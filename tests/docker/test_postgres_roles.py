"""docker/postgres-roles.sh (issue 61 item 7), run against a real PostgreSQL server as the stack's one-shot service
runs it: the results store's role owns its database and nothing else, Airflow's metadata role its own, neither a
superuser, neither able to open the other's database; a volume of before (its superuser `airflow` owning both
databases) is moved to that layout keeping every row. The stack itself (containers, networks) is
scripts/stack-check.sh's."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "postgres-roles.sh"
PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))[-1]
PASSWORDS = {
    "POSTGRES_PASSWORD": "superuser-pw-0123456789",
    "AIRFLOW_DB_PASSWORD": "airflow-pw-0123456789",
    "SCALEWATCH_RESULTS_PASSWORD": "results-pw-0123456789",
}

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A PostgreSQL cluster as the postgres image makes it: bootstrap superuser SUPERUSER with POSTGRES_PASSWORD,
    scram-sha-256 for every connection, on 127.0.0.1."""

    def __init__(self, superuser: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sw-pg-roles-", dir="/var/tmp"))
        self.port = _free_port()
        shutil.chown(self.dir, "postgres")
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORDS["POSTGRES_PASSWORD"] + "\n")
        shutil.chown(pwfile, "postgres")
        self._as_postgres(
            f"{PG_BIN}/initdb -D {self.dir}/data -U {superuser} -A scram-sha-256 --pwfile={pwfile} -E UTF8 "
            "--locale=C.UTF-8"
        )
        pwfile.unlink()
        self._as_postgres(
            f"{PG_BIN}/pg_ctl -D {self.dir}/data -l {self.dir}/log -w "
            f"-o '-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1' start"
        )

    @staticmethod
    def _as_postgres(command: str) -> None:
        subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", command], check=True, capture_output=True, timeout=120)

    def connect(self, user: str, password: str, dbname: str) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=user, password=password, dbname=dbname, autocommit=True
        )

    def roles(self) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | PASSWORDS
        env |= {"PGHOST": "127.0.0.1", "PGPORT": str(self.port), "PATH": f"{PG_BIN}:{os.environ['PATH']}"}
        return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False)

    def stop(self) -> None:
        self._as_postgres(f"{PG_BIN}/pg_ctl -D {self.dir}/data -m fast stop")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def server(request):
    s = Server(request.param)
    yield s
    s.stop()


def _role(conn: psycopg.Connection, name: str) -> tuple:
    return conn.execute(
        "SELECT rolsuper, rolcreatedb, rolcreaterole, rolcanlogin FROM pg_roles WHERE rolname = %s", (name,)
    ).fetchone()


def _assert_split(server: Server) -> None:
    """The layout the stack needs: each role in its own database only, neither privileged."""
    with server.connect("postgres", PASSWORDS["POSTGRES_PASSWORD"], "postgres") as conn:
        assert _role(conn, "postgres")[0] is True
        for name in ("airflow", "scalewatch"):
            assert _role(conn, name) == (False, False, False, True), name
        owners = dict(conn.execute("SELECT datname, pg_get_userbyid(datdba) FROM pg_database").fetchall())
        assert owners["airflow"] == "airflow" and owners["scalewatch"] == "scalewatch"
    # the results role is refused Airflow's metadata (and the superuser's database); Airflow's the results'
    for user, dbname in (("scalewatch", "airflow"), ("scalewatch", "postgres"), ("airflow", "scalewatch")):
        password = PASSWORDS["SCALEWATCH_RESULTS_PASSWORD" if user == "scalewatch" else "AIRFLOW_DB_PASSWORD"]
        with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
            server.connect(user, password, dbname)
    with server.connect("scalewatch", PASSWORDS["SCALEWATCH_RESULTS_PASSWORD"], "scalewatch") as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS made_by_the_store (id int)")  # it owns its schema


@pytest.mark.parametrize("server", ["postgres"], indirect=True)
def test_a_new_volume_gets_a_least_privilege_role_per_database_and_a_second_start_changes_nothing(server):
    first = server.roles()
    assert first.returncode == 0, first.stderr
    _assert_split(server)
    with server.connect("airflow", PASSWORDS["AIRFLOW_DB_PASSWORD"], "airflow") as conn:
        conn.execute("CREATE TABLE dag_run (id serial PRIMARY KEY, dag_id text)")
        conn.execute("INSERT INTO dag_run (dag_id) VALUES ('d')")
    again = server.roles()
    assert again.returncode == 0, again.stderr
    _assert_split(server)
    # a real query of Airflow's metadata by the results role: refused at the door
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        server.connect("scalewatch", PASSWORDS["SCALEWATCH_RESULTS_PASSWORD"], "airflow").execute(
            "SELECT count(*) FROM dag_run"
        )


@pytest.mark.parametrize("server", ["airflow"], indirect=True)
def test_a_volume_of_before_is_split_keeping_its_rows(server):
    """Its superuser `airflow` made both databases and every table (a serial, an identity, an enum, a view, a
    function): after the script, postgres is the superuser and each role owns its database's objects."""
    with server.connect("airflow", PASSWORDS["POSTGRES_PASSWORD"], "postgres") as conn:
        conn.execute("CREATE DATABASE airflow")
        conn.execute("CREATE DATABASE scalewatch")
    with server.connect("airflow", PASSWORDS["POSTGRES_PASSWORD"], "airflow") as conn:
        conn.execute("CREATE TYPE state AS ENUM ('queued', 'success')")
        conn.execute("CREATE TABLE dag_run (id serial PRIMARY KEY, dag_id text, state state)")
        conn.execute("INSERT INTO dag_run (dag_id, state) VALUES ('scaling_regression', 'success')")
        conn.execute("CREATE VIEW runs AS SELECT dag_id FROM dag_run")
        conn.execute("CREATE FUNCTION one() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    with server.connect("airflow", PASSWORDS["POSTGRES_PASSWORD"], "scalewatch") as conn:
        conn.execute("CREATE TABLE results (id int GENERATED ALWAYS AS IDENTITY, run text)")
        conn.execute("INSERT INTO results (run) VALUES ('week-1')")
    done = server.roles()
    assert done.returncode == 0, done.stderr
    assert "the superuser airflow of an earlier volume becomes postgres" in done.stdout
    _assert_split(server)
    with server.connect("airflow", PASSWORDS["AIRFLOW_DB_PASSWORD"], "airflow") as conn:
        assert conn.execute("SELECT dag_id, state::text, one() FROM dag_run").fetchall() == [
            ("scaling_regression", "success", 1)
        ]
        conn.execute("INSERT INTO dag_run (dag_id) VALUES ('next')")  # its sequence moved with the table
        conn.execute("ALTER TYPE state ADD VALUE 'failed'")  # owner of the type
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (2,)
    with server.connect("scalewatch", PASSWORDS["SCALEWATCH_RESULTS_PASSWORD"], "scalewatch") as conn:
        conn.execute("INSERT INTO results (run) VALUES ('week-2')")
        conn.execute("ALTER TABLE results ADD COLUMN note text")  # the store's migrations run as its owner
        assert conn.execute("SELECT run FROM results ORDER BY id").fetchall() == [("week-1",), ("week-2",)]
    assert server.roles().returncode == 0  # the next start: nothing left to move
    _assert_split(server)
