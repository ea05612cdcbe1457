"""Opening, reading and downgrading a store never corrupts or silently loses it: concurrent first opens
of SQLite are serialised, pages read through a read-only store, an unknown hand-numbered version and
downgrades that would drop data are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from bench.store.db import ResultsStore
from bench.store.errors import StoreDowngradeRefused, StoreSchemaError, StoreUnavailable
from bench.store.migrate import MIGRATION_LOCK_SUFFIX, SCHEMA_REVISION, VERSION_TABLE, alembic_config
from tests.bench.store.test_store import frame

# One interpreter per round imports the store once, then forks the four openers: each is its own
# process (its own engine, connections and lock file descriptor), as four tasks opening one store are,
# without four interpreters importing SQLAlchemy and Alembic and polling for `go` while the others do.
OPENER = """
import os, sys, time, traceback
from bench.store.db import ResultsStore
folder, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
children = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            open(os.path.join(folder, f"ready{i}"), "w").close()
            while not os.path.exists(os.path.join(folder, "go")):
                time.sleep(0.001)
            ResultsStore(url)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    children.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
print("openers exited", codes)
sys.exit(1 if any(codes) else 0)
"""


def test_processes_opening_a_fresh_sqlite_store_at_once_all_succeed_with_one_version_row(tmp_path):
    """Two guards serialise first opens: the flock around migrate() (bench.store.migrate.migration_lock) and
    the migration's own transaction, which takes SQLite's write lock up front (BEGIN IMMEDIATE). With neither,
    2 of 4 rounds failed (`table scalewatch_alembic_version already exists`); with either one this test passes,
    so it guards the pair (checked by removing each, then both); the next test guards the flock alone."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    for round_ in range(6):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        url = f"sqlite:///{folder}/fresh.db"
        go = folder / "go"
        openers = subprocess.Popen(
            [sys.executable, "-c", OPENER, str(folder), url, "4"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not all((folder / f"ready{i}").exists() for i in range(4)) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()  # all four past their imports: they open the store at the same moment
        out, _ = openers.communicate(timeout=120)
        assert openers.returncode == 0, (round_, out[-2400:])
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            assert conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [(SCHEMA_REVISION,)]
        engine.dispose()
        assert Path(f"{folder}/fresh.db{MIGRATION_LOCK_SUFFIX}").exists()  # the lock lives beside the database


def test_a_first_open_waits_for_the_migration_lock_another_process_holds(tmp_path):
    """The flock alone (the test above passes with either guard): while this process holds the lock file,
    another's first open of the store waits on it, which the kernel's lock table shows as a blocked FLOCK
    on that file, and finishes once it is released."""
    import fcntl

    db = tmp_path / "fresh.db"
    lock = os.open(f"{db}{MIGRATION_LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)
    inode = os.fstat(lock).st_ino
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    code = "import sys; from bench.store.db import ResultsStore; ResultsStore(sys.argv[1])"
    opener = subprocess.Popen(
        [sys.executable, "-c", code, f"sqlite:///{db}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def waiting() -> bool:  # /proc/locks: "N: -> FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> 0 EOF"
            lines = Path("/proc/locks").read_text().splitlines()
            return any(" -> FLOCK " in line and f":{inode} " in line for line in lines)

        deadline = time.monotonic() + 120  # the opener's imports, on a loaded machine
        while not waiting() and opener.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert opener.poll() is None and waiting(), "the first open did not wait for the migration lock"
    finally:
        os.close(lock)  # releases the lock
    out, _ = opener.communicate(timeout=120)
    assert opener.returncode == 0, out[-2400:]
    assert ResultsStore(f"sqlite:///{db}").schema_version() == SCHEMA_REVISION


def test_a_read_only_store_serves_reads_and_cannot_write_or_migrate(url):
    writer = ResultsStore(url)
    writer.upsert(frame("w1", 100, "2026-01-01"), {"suite_run_id": "w1", "cluster": "c", "dag_id": "d"})
    reader = ResultsStore.open_read_only(url)
    assert reader.schema_version() == SCHEMA_REVISION
    assert reader.dag_ids() == ["d"] and len(reader.suite_runs(["d"])) == 1 and reader.suite_runs(["x"]).empty
    shown = reader.results_of(["d"], ["suite_run_id", "gpus", "throughput_img_s"], cluster="c", workload="ssd")
    assert list(shown.columns) == ["suite_run_id", "gpus", "throughput_img_s"] and len(shown) == 2
    assert reader.results_of(["d"], ["gpus"], cluster="other").empty and reader.results_of([], ["gpus"]).empty
    assert reader.series_options(["d"]).to_dict("records") == [
        {"cluster": "c", "workload": "ssd", "config_key": "tiny/dali/bs8/img128/amp0"}
    ]
    with pytest.raises(sa.exc.DBAPIError, match=r"(?i)read-only|readonly"):
        reader.upsert(frame("w2", 100, "2026-01-02"))
    with pytest.raises(StoreSchemaError, match="opened read-only"):
        reader.migrate()
    assert len(writer.frame()) == 2


def test_a_read_only_store_refuses_a_schema_that_is_not_at_head_and_changes_nothing(url):
    store = ResultsStore(url)
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0007")
    store.engine.dispose()
    with pytest.raises(
        StoreSchemaError, match=rf"schema revision '0007', and this scalewatch reads '{SCHEMA_REVISION}'"
    ):
        ResultsStore.open_read_only(url)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar() == "0007"
    engine.dispose()


def test_a_read_only_open_of_a_missing_sqlite_store_creates_nothing(tmp_path):
    with pytest.raises(StoreUnavailable, match="does not exist yet"):
        ResultsStore.open_read_only(f"sqlite:///{tmp_path}/none.db")
    assert list(tmp_path.iterdir()) == []


def test_a_hand_numbered_store_claiming_an_unknown_version_is_refused_untouched(url):
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE scalewatch_schema (version INTEGER PRIMARY KEY)")
        conn.exec_driver_sql("INSERT INTO scalewatch_schema (version) VALUES (1), (2), (3), (4), (5)")
        conn.exec_driver_sql(
            "CREATE TABLE results (suite_run_id TEXT, workload TEXT, gpus INTEGER, config_key TEXT, dag_id TEXT, "
            "PRIMARY KEY (suite_run_id, workload, gpus))"
        )
        conn.exec_driver_sql("INSERT INTO results VALUES ('w0', 'ssd', 1, 'k', 'd')")
    with pytest.raises(StoreSchemaError, match=r"hand-numbered schema version 5 .*known versions: 1, 2, 3, 4"):
        ResultsStore(url)
    with engine.connect() as conn:
        assert VERSION_TABLE not in sa.inspect(conn).get_table_names()
        assert conn.exec_driver_sql("SELECT count(*) FROM results").scalar() == 1
    engine.dispose()


def test_the_first_revisions_downgrade_refuses_to_drop_tables_holding_rows(url):
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
        conn.exec_driver_sql("INSERT INTO results (suite_run_id, workload, gpus) VALUES ('w0', 'ssd', 1)")
    with engine.begin() as conn, pytest.raises(StoreDowngradeRefused, match=r"drop table results, which holds 1 row"):
        command.downgrade(alembic_config(conn), "base")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM results").scalar() == 1
        assert conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar() == "0001"
    engine.dispose()


def test_downgrades_that_would_drop_columns_holding_values_are_refused(url):
    store = ResultsStore(url)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO change_alerts (cluster, workload, gpus, config_key, metric, changed_at, size) "
            "VALUES ('c', 'ssd', 1, 'k', 'throughput_img_s', '2026-01-01', -0.1)"
        )
    # 0008 and 0007 run in one transaction: 0007's refusal takes 0008's (lossless) step back too
    with (
        pytest.raises(StoreDowngradeRefused, match=r"change_alerts.size \(1 value"),
        store.migration_connection() as conn,
    ):
        command.downgrade(alembic_config(conn), "0006")
    assert store.schema_version() == SCHEMA_REVISION and store.change_alerts()["size"].tolist() == [-0.1]


def test_the_dag_key_downgrade_is_refused_while_two_dags_share_a_run_id(url):
    store = ResultsStore(url)
    for dag in ("a", "b"):
        store.upsert(frame("same", 100, "2026-01-01"), {"suite_run_id": "same", "cluster": "c", "dag_id": dag})
    # the later revisions' (lossless) steps run first, in the same transaction: the refusal takes them back too
    with (
        pytest.raises(StoreDowngradeRefused, match=r"below revision 0008: 2 row"),
        store.migration_connection() as conn,
    ):
        command.downgrade(alembic_config(conn), "0007")
    assert store.schema_version() == SCHEMA_REVISION and len(store.frame()) == 4
