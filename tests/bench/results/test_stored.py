"""A stored run's config is read back through one typed, lenient reader (bench.results.stored, issue 52):
the dashboard, the overview and the API take Thresholds from it and no reader fills in a default of its
own; the overview's storage-ceiling lines are judged with the run's own tolerance and window."""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

import pandas as pd

from bench.config.models import Thresholds
from bench.results.stored import stored_config, stored_thresholds, thresholds_or_defaults

ROOT = Path(__file__).resolve().parents[3]
NOW = pd.Timestamp("2026-12-05T12:00:00", tz="UTC")


def test_stored_thresholds_are_typed_and_take_the_models_defaults_for_what_the_run_lacks():
    th = stored_thresholds(
        json.dumps({"thresholds": {"regression_tolerance": 0.3, "min_scaling_efficiency_by_gpus": {"16": 0.9}}})
    )
    assert isinstance(th, Thresholds)
    assert th.regression_tolerance == 0.3 and th.min_scaling_efficiency_by_gpus == {16: 0.9}
    assert th.history_runs == Thresholds().history_runs  # not stored: the model's default, no reader's
    assert stored_thresholds({"thresholds": {"history_runs": 3}}).history_runs == 3  # a dict is read alike


def test_a_runs_config_as_stored_gives_its_bounds_back_and_so_do_runs_stored_before_the_groups(tmp_path):
    """A run stores its SweepConfig's JSON (bench.suite.record), whose `bounds` group is the thresholds it was
    judged with; runs stored before the settings were grouped held the same fields as `thresholds`."""
    from bench.config.settings import settings_from

    cfg = settings_from({"regression_tolerance": 0.25, "history_runs": 5}).sweep_config(tmp_path, tmp_path / "r")
    assert stored_thresholds(cfg.model_dump_json()) == cfg.bounds
    assert stored_thresholds({"thresholds": cfg.bounds.model_dump(mode="json")}) == cfg.bounds


def test_the_reader_is_lenient_with_what_old_runs_stored(caplog):
    for nothing in (None, "", "not json", "[1, 2]", json.dumps({"train": {}}), json.dumps({"thresholds": []})):
        assert stored_thresholds(nothing) is None, nothing
        assert thresholds_or_defaults(nothing) == Thresholds()
    assert stored_config("not json") == {} and stored_config('{"a": 1}') == {"a": 1}
    old = {"thresholds": {"straggler_gap": 0.001, "regression_tolerance": 0.2, "dropped_since": 1}}
    with caplog.at_level(logging.WARNING, logger="bench.results.stored"):
        th = stored_thresholds(old)
    assert th.regression_tolerance == 0.2 and th.straggler_gap == Thresholds().straggler_gap
    assert "straggler_gap" in caplog.text


# Files that read a stored config and may not restate a default: `.get(key, DEFAULT_...)` is the pattern
# the review found six times (compare.py's, the last, is gone too: no file is exempt).


def test_no_reader_fills_in_a_default_of_its_own():
    found = []
    for top in ("bench", "plugins"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("bench/cli/"):  # a flag's help text names its default
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and len(node.args) == 2:
                    fallback = node.args[1]
                    if isinstance(fallback, ast.Name) and fallback.id.startswith("DEFAULT_"):
                        found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "read the stored config with bench.results.stored instead: " + "; ".join(found)


def test_the_overviews_ceiling_line_is_judged_with_the_runs_own_tolerance():
    """The suite judged its probe with its own regression_tolerance and history_runs: a 40% drop a run
    allowed 50% for is `ok` on the overview, as the suite called it, and `regressed` with the defaults."""
    from bench.analysis.history.overview import ceiling_lines

    ceilings = [500.0, 505.0, 495.0, 502.5, 497.5, 501.0, 499.0, 500.5, 300.0]
    n = len(ceilings)
    probes = pd.DataFrame(
        {
            "suite_run_id": [f"r{i}" for i in range(n)],
            "cluster": "c",
            "probed_at": [(NOW - pd.Timedelta(weeks=n - 1 - i)).isoformat() for i in range(n)],
            "paths": '["/data/coco"]',
            "sample_bytes": 1e9,
            "ceiling_mb_s": ceilings,
            "accepted": True,
            "conclusive": True,
        }
    )
    assert ceiling_lines(probes, NOW)[0]["status"] == "regressed"
    (line,) = ceiling_lines(probes, NOW, {f"r{n - 1}": Thresholds(regression_tolerance=0.5)})
    assert line["status"] == "ok"
    assert ceiling_lines(probes, NOW, {"r0": Thresholds(regression_tolerance=0.5)})[0]["status"] == "regressed"
