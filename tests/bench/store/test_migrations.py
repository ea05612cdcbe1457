"""Alembic takes over a store written by the hand-numbered schema (version 3) in place, keeping every row,
on SQLite and PostgreSQL; a store newer than the code is refused."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from bench.store.db import ResultsStore
from bench.store.errors import StoreSchemaError
from bench.store.migrate import SCHEMA_REVISION, VERSION_TABLE

LEGACY_FLOATS = (
    "throughput_img_s",
    "epoch_time_s",
    "first_epoch_time_s",
    "avg_read_mb_s",
    "peak_read_mb_s",
    "gpu_util",
    "gpu_mem_util",
    "cpu_util",
    "mem_util",
    "bytes_from_storage",
    "bytes_consumed",
    "dataset_bytes",
)


def legacy_v3_store(url: str, rows: int = 12) -> None:
    """The tables exactly as the hand-numbered migrations 1-3 (scalewatch before Alembic) created them."""
    engine = sa.create_engine(url)
    md = sa.MetaData()
    sa.Table(
        "scalewatch_schema",
        md,
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
    )
    results = sa.Table(
        "results",
        md,
        sa.Column("suite_run_id", sa.Text, primary_key=True),
        sa.Column("workload", sa.Text, primary_key=True),
        sa.Column("gpus", sa.Integer, primary_key=True),
        sa.Column("state", sa.Text),
        sa.Column("valid", sa.Boolean),
        *(sa.Column(c, sa.Float) for c in LEGACY_FLOATS),
        sa.Column("cache_risk", sa.Boolean),
        sa.Column("bandwidth_valid", sa.Boolean),
        sa.Column("drop_caches", sa.Text),
        sa.Column("launcher", sa.Text),
        sa.Column("config_key", sa.Text),
        sa.Column("cluster", sa.Text),
        sa.Column("started_at", sa.Text),
        sa.Column("reason", sa.Text),
        sa.Column("versions", sa.Text),
        sa.Column("schema_version", sa.Integer),
        sa.Column("scaling_efficiency", sa.Float),
        sa.Column("bandwidth_efficiency", sa.Float),
        sa.Column("passed", sa.Boolean),
        sa.Column("failed_expectations", sa.Text),
        sa.Column("accepted", sa.Boolean),
    )
    suite_runs = sa.Table(
        "suite_runs",
        md,
        sa.Column("suite_run_id", sa.Text, primary_key=True),
        sa.Column("started_at", sa.Text),
        sa.Column("cluster", sa.Text),
        sa.Column("passed", sa.Boolean),
        sa.Column("report_path", sa.Text),
        sa.Column("config", sa.Text),
    )
    with engine.begin() as conn:
        md.drop_all(conn)
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {VERSION_TABLE}")
        md.create_all(conn)
        conn.exec_driver_sql("CREATE INDEX ix_results_history ON results (workload, gpus, cluster, started_at)")
        conn.exec_driver_sql("INSERT INTO scalewatch_schema (version) VALUES (1), (2), (3)")
        for i in range(rows):
            conn.execute(
                results.insert().values(
                    suite_run_id=f"w{i // 2:02d}",
                    workload="ssd",
                    gpus=1 + i % 2,
                    state="COMPLETED",
                    valid=True,
                    throughput_img_s=100.0 + i,
                    cluster="c",
                    config_key="tiny/dali/bs8/img128/amp0",
                    started_at=f"2026-01-{1 + i // 2:02d}T03:00:00",
                    accepted=True,
                    passed=True,
                    schema_version=1,
                )
            )
        for w in range(rows // 2):
            config = {"workloads": ["ssd"], "results_url": "postgresql+psycopg://sw:hunter2pw@db/sw"}
            conn.execute(suite_runs.insert().values(suite_run_id=f"w{w:02d}", passed=True, config=json.dumps(config)))
    engine.dispose()


def test_a_store_written_by_the_previous_schema_upgrades_in_place_keeping_every_row(url):
    legacy_v3_store(url)
    store = ResultsStore(url)
    assert store.schema_version() == SCHEMA_REVISION
    rows = store.frame()
    assert len(rows) == 12 and sorted(rows["throughput_img_s"]) == [100.0 + i for i in range(12)]
    assert rows["verdict"].isna().all() and rows["throughput_ci_low"].isna().all()  # unknown before, not invented
    runs = store.suite_runs()
    assert len(runs) == 6 and not runs["config"].str.contains("hunter2pw").any()  # stored passwords scrubbed
    assert ResultsStore(url).schema_version() == SCHEMA_REVISION  # opening again changes nothing
    assert len(ResultsStore(url).frame()) == 12
    median = store.history_median(rows[rows["suite_run_id"] == "w05"].reset_index(drop=True), 8, "w05")
    assert median.notna().all()  # the upgraded history still serves the regression check


def test_a_store_newer_than_the_code_is_refused(url):
    legacy_v3_store(url, rows=2)
    ResultsStore(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version_num = '0099'")
    with pytest.raises(StoreSchemaError, match=r"schema revision '0099', which this scalewatch does not know"):
        ResultsStore(url)
    with engine.connect() as conn:  # and nothing was changed by trying
        assert conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar() == "0099"
        assert conn.exec_driver_sql("SELECT count(*) FROM results").scalar() == 2


def test_change_points_stored_before_step_sizes_were_kept_stay_and_gain_an_empty_size(url):
    """0007 adds `size` to change_alerts: a store at 0006 with an alerted change keeps it, size unknown."""
    from alembic import command

    from bench.store.migrate import alembic_config

    store = ResultsStore(url)
    with store.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0006")
        assert "size" not in {c["name"] for c in sa.inspect(conn).get_columns("change_alerts")}
        conn.exec_driver_sql(
            "INSERT INTO change_alerts (cluster, workload, gpus, config_key, metric, changed_at, change, state) "
            "VALUES ('c', 'ssd', 4, 'k', 'throughput_img_s', '2026-01-05', -0.1, 'alerted')"
        )
    store.engine.dispose()
    upgraded = ResultsStore(url)
    assert upgraded.schema_version() == SCHEMA_REVISION
    kept = upgraded.change_alerts()
    assert len(kept) == 1 and kept["change"].iloc[0] == -0.1 and kept["state"].iloc[0] == "alerted"
    assert kept["size"].isna().all()
