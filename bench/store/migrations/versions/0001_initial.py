"""The store as the hand-numbered migrations 1-3 left it (a frozen snapshot: never derived from code).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bench.store.migrations.guard import refuse_data_loss

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_FLOATS = (
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


def upgrade() -> None:
    op.create_table(
        "results",
        sa.Column("suite_run_id", sa.Text, primary_key=True),
        sa.Column("workload", sa.Text, primary_key=True),
        sa.Column("gpus", sa.Integer, primary_key=True),
        sa.Column("state", sa.Text),
        sa.Column("valid", sa.Boolean),
        *(sa.Column(name, sa.Float) for name in _FLOATS),
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
    op.create_table(
        "suite_runs",
        sa.Column("suite_run_id", sa.Text, primary_key=True),
        sa.Column("started_at", sa.Text),
        sa.Column("cluster", sa.Text),
        sa.Column("passed", sa.Boolean),
        sa.Column("report_path", sa.Text),
        sa.Column("config", sa.Text),
    )
    op.create_index("ix_results_history", "results", ["workload", "gpus", "cluster", "started_at"])


def downgrade() -> None:
    refuse_data_loss(revision, "results")
    refuse_data_loss(revision, "suite_runs")
    op.drop_table("suite_runs")
    op.drop_table("results")
