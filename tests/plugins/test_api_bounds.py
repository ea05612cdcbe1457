"""The JSON API's paging is bounded at the edge (issue 48, item 3): a huge offset is a 400 naming it."""

from __future__ import annotations

import pytest

from bench.config.types import parse
from bench.errors import ConfigError
from bench.store.db import ResultsStore


@pytest.mark.parametrize("model", ["SeriesQuery", "PointsQuery"])
@pytest.mark.parametrize("offset", ["99999999999999999999", str(2**63)])
def test_an_offset_past_the_bound_names_the_field(model, offset):
    from scalewatch.web import api

    with pytest.raises(ConfigError, match=r"^offset: Input should be less than or equal to 1000000000"):
        parse(getattr(api, model), {"offset": offset})


def test_the_largest_offset_allowed_reaches_sqlite_without_overflow(tmp_path):
    """The bound is one SQLite binds: the store answers an empty page for it (2**63 raised OverflowError)."""
    from scalewatch.web.api import MAX_OFFSET

    store = ResultsStore(f"sqlite:///{tmp_path / 'results.db'}")
    keys, total = store.series_keys(["scaling_regression"], 50, MAX_OFFSET)
    assert len(keys) == 0 and total == 0
    with pytest.raises(OverflowError):
        store.series_keys(["scaling_regression"], 50, 2**63)
