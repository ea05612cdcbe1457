"""The store's own errors: each a ConfigError, turned into a message once at the edge."""

from __future__ import annotations

from bench.errors import ConfigError


class StoreSchemaError(ConfigError):
    """The store's schema is one this code cannot use (newer than it, unknown, or not at its head)."""


class StoreDowngradeRefused(StoreSchemaError):
    """A downgrade would drop a table or column that holds data (or merge rows): refused, nothing dropped."""


class StoreUnavailable(ConfigError):
    """The store cannot be opened as asked (a read-only open of a store that does not exist yet)."""
