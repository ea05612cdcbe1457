"""Storage sizing and the step-time breakdown (frame schema 3): the fio probe's history, per-row
per-GPU demand and supported GPUs, step-time shares, AU, the straggler and the bottleneck verdict.

Rows stored before keep NULL in the new columns (no probe or breakdown existed); no row is rewritten.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from bench.store.migrations.guard import refuse_data_loss

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COLUMNS = (
    ("per_gpu_read_mb_s", sa.Float),
    ("per_gpu_peak_mb_s", sa.Float),
    ("img_s_per_gpu", sa.Float),
    ("bytes_per_image", sa.Float),
    ("storage_ceiling_mb_s", sa.Float),
    ("supported_gpus", sa.Integer),
    ("supported_gpus_peak", sa.Integer),
    ("supported_gpus_au", sa.Integer),
    ("min_supported_gpus", sa.Integer),
    ("data_wait_share", sa.Float),
    ("compute_share", sa.Float),
    ("comm_share", sa.Float),
    ("au", sa.Float),
    ("straggler_gap", sa.Float),
    ("slowest_rank", sa.Integer),
    ("slowest_host", sa.Text),
    ("rank_breakdown", sa.Text),
    ("bottleneck", sa.Text),
    ("bottleneck_evidence", sa.Text),
)


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("results")}
    with op.batch_alter_table("results") as batch:
        for name, kind in COLUMNS:
            if name not in have:
                batch.add_column(sa.Column(name, kind))
    op.create_table(
        "storage_probes",
        sa.Column("suite_run_id", sa.Text, primary_key=True),
        sa.Column("cluster", sa.Text),
        sa.Column("probed_at", sa.Text),
        sa.Column("paths", sa.Text),
        sa.Column("ceiling_mb_s", sa.Float),
        sa.Column("conclusive", sa.Boolean),
        sa.Column("reason", sa.Text),
        sa.Column("method", sa.Text),
        sa.Column("block_size", sa.Integer),
        sa.Column("sample_bytes", sa.Float),
        sa.Column("levels", sa.Text),
        sa.Column("accepted", sa.Boolean),
    )
    op.create_index("ix_storage_probes_history", "storage_probes", ["cluster", "paths", "probed_at"])


def downgrade() -> None:
    refuse_data_loss(revision, "storage_probes")
    refuse_data_loss(revision, "results", [name for name, _ in COLUMNS])
    op.drop_index("ix_storage_probes_history", table_name="storage_probes")
    op.drop_table("storage_probes")
    with op.batch_alter_table("results") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
