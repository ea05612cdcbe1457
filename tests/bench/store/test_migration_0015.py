"""Revision 0015 (the checkpoint columns) on SQLite and PostgreSQL: a store written before it keeps every
row and gains the six columns empty; the downgrade is refused while any of them holds a value, and
once they are empty it gives back every row."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from bench.store.db import ResultsStore
from bench.store.errors import StoreDowngradeRefused
from bench.store.migrate import SCHEMA_REVISION, alembic_config
from tests.bench.store.test_store import frame

CKPT = (
    "ckpt_write_mb_s",
    "ckpt_read_mb_s",
    "ckpt_bytes",
    "ckpt_stall_share",
    "ckpt_write_checked",
    "ckpt_read_checked",
)
SUITE = {"cluster": "c", "passed": True, "config": "{}"}


def columns(conn) -> set[str]:
    return {c["name"] for c in sa.inspect(conn).get_columns("results")}


def test_0015_adds_the_checkpoint_columns_keeping_every_row_and_its_downgrade_loses_nothing(url):
    store = ResultsStore(url)
    for i, suite in enumerate(("w1", "w2")):
        store.upsert(frame(suite, 100.0 + i, f"2026-01-0{i + 1}"), {"suite_run_id": suite, **SUITE})
    with store.migration_connection() as conn:  # the store as 0014 left it: four rows, no checkpoint columns
        command.downgrade(alembic_config(conn), "0014")
        assert not columns(conn) & set(CKPT)
    store.engine.dispose()
    store = ResultsStore(url)  # opening it upgrades it
    assert store.schema_version() == SCHEMA_REVISION
    rows = store.frame()
    assert len(rows) == 4 and sorted(rows["throughput_img_s"]) == [100.0, 101.0, 200.0, 202.0]
    assert rows[list(CKPT)].isna().all().all()  # not measured then: empty, never guessed
    measured = frame("w3", 102.0, "2026-01-03").assign(
        ckpt_write_mb_s=310.0,
        ckpt_read_mb_s=420.0,
        ckpt_bytes=4.0 * 2**20,
        ckpt_stall_share=0.2,
        ckpt_write_checked=330.0,
        ckpt_read_checked=420.0,
    )
    store.upsert(measured, {"suite_run_id": "w3", **SUITE})
    with pytest.raises(StoreDowngradeRefused, match="ckpt_"), store.migration_connection() as conn:
        command.downgrade(alembic_config(conn), "0014")
    assert store.schema_version() == SCHEMA_REVISION and len(store.frame()) == 6
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE results SET " + ", ".join(f"{c} = NULL" for c in CKPT)))
    with store.migration_connection() as conn:
        command.downgrade(alembic_config(conn), "0014")
        assert conn.execute(sa.text("SELECT count(*) FROM results")).scalar() == 6
    store.engine.dispose()
