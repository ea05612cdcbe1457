"""The store's connection, migrations on open, and transactions (one per suite run's records)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Self

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from bench.store.engine import check_url, read_only_engine, shown_url, sqlite_file, sqlite_pragmas
from bench.store.errors import StoreSchemaError, StoreUnavailable
from bench.store.migrate import SCHEMA_REVISION, adopt_legacy, alembic_config, current_revision, migration_lock


class StoreConnection:
    """The store's database and its transactions: what every kind of record's methods (bench/store/*.py)
    read and write through. Opening read-write migrates to this code's head; the pages open it
    read-only or at head (they never migrate)."""

    read_only = False
    _unit: Connection | None = None  # the connection of the open `transaction()`, if any

    def __init__(self, url: str) -> None:
        self.engine: Engine = sa.create_engine(check_url(url), future=True)
        if self.engine.dialect.name == "sqlite":
            sa.event.listen(self.engine, "connect", sqlite_pragmas)
        self.migrate()

    @classmethod
    def open_read_only(cls, url: str) -> Self:
        """The store for pages that only show it: never migrates, cannot write, refuses a schema that is not
        this code's head (StoreSchemaError) or a store that does not exist (StoreUnavailable)."""
        store = cls.__new__(cls)
        store.engine = read_only_engine(url)
        store.read_only = True
        try:
            store.check_head()
        except sa.exc.OperationalError as error:
            store.engine.dispose()
            raise StoreUnavailable(f"results store {shown_url(url)} cannot be opened read-only: {error.orig}") from None
        except StoreSchemaError:
            store.engine.dispose()
            raise
        return store

    @classmethod
    def open_at_head(cls, url: str) -> Self:
        """A writable store that never migrates (the web server's annotations): refuses one not at head."""
        store = cls.__new__(cls)
        store.engine = sa.create_engine(check_url(url), future=True)
        if store.engine.dialect.name == "sqlite":
            sa.event.listen(store.engine, "connect", sqlite_pragmas)
        try:
            store.check_head()
        except (StoreSchemaError, sa.exc.OperationalError):
            store.engine.dispose()
            raise
        return store

    def check_head(self) -> None:
        """StoreSchemaError unless the store is at this code's head revision; reads one row."""
        with self.engine.connect() as conn:
            current = current_revision(conn)
        if current != SCHEMA_REVISION:
            raise StoreSchemaError(
                f"results store {shown_url(str(self.engine.url))} is at schema revision {current!r}, and this "
                f"scalewatch reads {SCHEMA_REVISION!r}: the pages never migrate it; the suite's tasks (or "
                "`bench sweep`) upgrade it when they next open it, a newer store needs this scalewatch upgraded"
            )

    def migrate(self) -> str:
        """Bring the store to this code's Alembic head, keeping every row; refuse a newer store."""
        import logging

        from alembic import command
        from alembic.script import ScriptDirectory
        from alembic.util.exc import CommandError

        if self.read_only:
            raise StoreSchemaError(f"results store {shown_url(str(self.engine.url))} was opened read-only")
        # Alembic narrates every open at INFO ("Context impl SQLiteImpl"): noise in a user's terminal.
        logging.getLogger("alembic").setLevel(logging.WARNING)
        with migration_lock(self.engine), self.migration_connection() as conn:
            if self.engine.dialect.name == "postgresql":  # concurrent first opens: one migrates
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(724101)"))
            cfg = alembic_config(conn)
            current = current_revision(conn)
            if current is None and "results" in sa.inspect(conn).get_table_names():
                adopt_legacy(conn, cfg, shown_url(str(self.engine.url)))
                current = current_revision(conn)
            if current is not None:
                try:
                    ScriptDirectory.from_config(cfg).get_revision(current)
                except CommandError:
                    raise StoreSchemaError(
                        f"results store {shown_url(str(self.engine.url))} is at schema revision {current!r}, "
                        f"which this scalewatch does not know (its newest is {SCHEMA_REVISION!r}): it was "
                        "written by a newer scalewatch; upgrade scalewatch before using this store"
                    ) from None
            command.upgrade(cfg, "head")
        return SCHEMA_REVISION

    @contextlib.contextmanager
    def migration_connection(self) -> Iterator[Connection]:
        """A connection in one real transaction, DDL included, for Alembic: a refused or failed step
        leaves the store as it was. pysqlite commits DDL on its own outside a transaction it began, so
        SQLite gets its own short-lived engine that issues BEGIN IMMEDIATE (the write lock up front)."""
        if self.engine.dialect.name != "sqlite" or sqlite_file(self.engine.url) is None:  # in-memory: one DB
            with self.engine.begin() as conn:
                yield conn
            return
        engine = sa.create_engine(self.engine.url, poolclass=sa.pool.NullPool)

        def autocommit_driver(dbapi_conn, record) -> None:
            dbapi_conn.isolation_level = None  # the driver begins nothing itself; BEGIN below covers DDL
            sqlite_pragmas(dbapi_conn, record)

        sa.event.listen(engine, "connect", autocommit_driver)
        sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        try:
            with engine.begin() as conn:
                yield conn
        finally:
            engine.dispose()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Every read and write of this store inside the block runs in one transaction: committed when the
        block ends, rolled back when it raises. `bench.suite.record` stores a run's rows, probe,
        environment and change points this way, so a crash leaves all of them or none; reads inside see
        the block's own writes (the change watch reads the run it just stored). Nested blocks join it."""
        if self._unit is not None:
            yield
            return
        with self.engine.begin() as conn:
            self._unit = conn
            try:
                yield
            finally:
                self._unit = None

    @contextlib.contextmanager
    def _begin(self) -> Iterator[Connection]:
        """A connection for writes: the open transaction's, else one that commits when the block ends."""
        if self._unit is not None:
            yield self._unit
            return
        with self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        """A connection for reads: the open transaction's (which sees its own writes), else a fresh one."""
        if self._unit is not None:
            yield self._unit
            return
        with self.engine.connect() as conn:
            yield conn

    def schema_version(self) -> str | None:
        with self.engine.connect() as conn:
            return current_revision(conn)

    def _insert(self, table: sa.Table):
        """The dialect's INSERT, which knows ON CONFLICT."""
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(table)

    def _upsert(self, table: sa.Table, row: dict, key: list[str]):
        """INSERT .. ON CONFLICT (key) DO UPDATE over `row`'s columns; values are bound at execute."""
        stmt = self._insert(table)
        return stmt.on_conflict_do_update(index_elements=key, set_={k: stmt.excluded[k] for k in row if k not in key})
