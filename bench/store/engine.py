"""Opening the store's database: which URLs are accepted, how one is shown (never with its password), a
read-only engine, and SQLite's connection settings."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from bench.errors import ConfigError
from bench.store.errors import StoreUnavailable


def shown_url(url: str) -> str:
    """The store's URL as it may be shown or stored anywhere: never with its password."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "(unparseable results URL)"


def check_url(url: str) -> str:
    """Only SQLite and PostgreSQL are supported; the error shows the URL without its password."""
    if not re.match(r"^(sqlite|postgresql(\+psycopg)?)://", url or ""):
        raise ConfigError(f"results URL {shown_url(url)}: must start with sqlite:// or postgresql[+psycopg]://")
    return url


def sqlite_file(url: sa.engine.URL) -> Path | None:
    """The database file of a SQLite URL (None for an in-memory one)."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).absolute()


def read_only_engine(url: str) -> Engine:
    """An engine that cannot write: SQLite opened with mode=ro, PostgreSQL sessions read-only."""
    parsed = sa.engine.make_url(check_url(url))
    if parsed.get_backend_name() == "sqlite":
        path = sqlite_file(parsed)
        if path is None:
            raise StoreUnavailable(f"results URL {shown_url(url)}: a read-only store needs a SQLite file")
        if not path.is_file():
            raise StoreUnavailable(
                f"results store {shown_url(url)} does not exist yet: the suite's tasks create it on their "
                "first run (the web pages only read it)"
            )
        ro = parsed.set(database=f"file:{quote(str(path))}", query={"mode": "ro", "uri": "true"})
        engine = sa.create_engine(ro, future=True)
        sa.event.listen(engine, "connect", sqlite_read_pragmas)
        return engine
    return sa.create_engine(
        parsed, future=True, connect_args={"options": "-c default_transaction_read_only=on"}, pool_pre_ping=True
    )


def sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=30000")  # first: the WAL switch itself may wait for another opener
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def sqlite_read_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()
