"""Revision 0014 on a store written before it (SQLite and PostgreSQL): its annotations are kept as the first
entries of the log, with the DAG of their change's run; its alerted change points count as delivered to
every target, so none is sent again; the downgrade gives every row back, or refuses."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from bench.store.db import ResultsStore
from bench.store.errors import StoreDowngradeRefused
from bench.store.migrate import SCHEMA_REVISION, alembic_config
from tests.bench.store.test_store import frame

KEY = {"cluster": "c", "workload": "ssd", "gpus": 1, "config_key": "tiny/dali/bs8/img128/amp0"}
CHANGES = {  # changed_at -> (state, recovered_in)
    "2026-01-05": ("alerted", None),
    "2026-02-02": ("recovered", "w9"),
    "2026-03-02": ("recorded", None),
}


def store_at_0013(url: str) -> None:
    """A store as revision 0013 left it: a run of DAG dA, its change points, one annotation."""
    store = ResultsStore(url)
    store.upsert(frame("w1", 100.0, "2026-01-05", gpus=(1,)), {"suite_run_id": "w1", "cluster": "c", "dag_id": "dA"})
    with store.migration_connection() as conn:
        command.downgrade(alembic_config(conn), "0013")
        for at, (state, recovered_in) in CHANGES.items():
            conn.execute(
                sa.text(
                    "INSERT INTO change_alerts (cluster, workload, gpus, config_key, metric, changed_at, changed_in, "
                    "detected_at, detected_in, change, state, recovered_at, recovered_in) VALUES (:cluster, "
                    ":workload, :gpus, :config_key, 'throughput_img_s', :at, 'w1', :at, 'w1', -0.1, :state, "
                    ":recovered_at, :recovered_in)"
                ),
                KEY | {"at": at, "state": state, "recovered_at": recovered_in and at, "recovered_in": recovered_in},
            )
        conn.execute(
            sa.text(
                "INSERT INTO annotations (cluster, workload, gpus, config_key, metric, changed_at, kind, note, "
                "author, created_at) VALUES (:cluster, :workload, :gpus, :config_key, 'throughput_img_s', "
                "'2026-01-05', 'expected', 'new firmware', 'alice', '2026-01-20')"
            ),
            KEY,
        )
    store.engine.dispose()


def test_0014_downgrade_is_refused_while_the_log_holds_more_than_0013_can_keep(url):
    store = ResultsStore(url)
    point = KEY | {"metric": "throughput_img_s", "changed_at": "2026-01-05"}
    for note in ("first", "second"):
        store.add_annotation(point | {"kind": "expected", "note": note, "author": "a", "dag_id": "dA"})
    with pytest.raises(StoreDowngradeRefused, match="1 annotation"), store.migration_connection() as conn:
        command.downgrade(alembic_config(conn), "0013")
    assert store.schema_version() == SCHEMA_REVISION and len(store.annotation_history()) == 2
    with store.engine.begin() as conn:  # one word left: 0013 keeps it
        conn.execute(sa.text("DELETE FROM annotations WHERE note = 'first'"))
        conn.execute(
            sa.text(
                "INSERT INTO change_deliveries (cluster, workload, gpus, config_key, metric, changed_at, notice, "
                "target) VALUES ('c', 'ssd', 1, 'k', 'throughput_img_s', '2026-01-05', 'change', 'slack:x')"
            )
        )
    with pytest.raises(StoreDowngradeRefused, match="1 delivery row"), store.migration_connection() as conn:
        command.downgrade(alembic_config(conn), "0013")
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM change_deliveries"))
    with store.migration_connection() as conn:
        command.downgrade(alembic_config(conn), "0013")
        assert conn.execute(sa.text("SELECT note, author FROM annotations")).all() == [("second", "a")]
    assert ResultsStore(url).annotations()["note"].tolist() == ["second"]  # and up again, kept
