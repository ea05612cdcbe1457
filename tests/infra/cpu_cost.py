"""Core-seconds per test (issue 51), for `scripts/cpu-cost.sh NAME python -m pytest -p tests.infra.cpu_cost ...`:
the script runs pytest in a cpuacct group of its own (SW_CPU_GROUP), so the group's usage read before a test's
setup and after its teardown is that test's CPU with every process it started (Airflow's task processes,
ranks, Chromium), whatever else the shared machine runs. A session fixture's start-up is charged to the
first test that needs it. Prints one line per test at the end; inactive without SW_CPU_GROUP."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_costs: list[tuple[str, float]] = []


def _usage() -> float | None:
    group = os.environ.get("SW_CPU_GROUP")
    return int(Path(group, "cpuacct.usage").read_text()) / 1e9 if group else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _usage()
    yield
    after = _usage()
    if before is not None and after is not None:
        _costs.append((item.nodeid, after - before))


def pytest_terminal_summary(terminalreporter):
    for nodeid, seconds in _costs:
        terminalreporter.write_line(f"cpu-cost test: {seconds:7.1f} core-s {nodeid}")
