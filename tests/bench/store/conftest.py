"""A store of its own per test, on SQLite and (when .ci/run or scripts/postgres.sh started one) PostgreSQL."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

URLS = ["sqlite"] + (["postgresql"] if os.environ.get("SCALEWATCH_TEST_PG_URL") else [])


@pytest.fixture(params=URLS)
def url(request, tmp_path):
    """A store of its own: these tests leave schemas (even a 'newer' one) that no other test may meet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/legacy.db"
        return
    import uuid

    admin_url = sa.engine.make_url(os.environ["SCALEWATCH_TEST_PG_URL"])
    name = f"sw_migrations_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()
