"""History in the report: only this suite's series, each point labelled with its own run's date."""

from __future__ import annotations

import re

import pandas as pd

from bench.analysis.frame import config_key
from bench.config.models import SweepConfig
from bench.report.html import _history_chart


def cfg(**over) -> SweepConfig:
    fields = {
        "dataset_path": "/nfs/data",
        "output_dir": "/o",
        "train": {"workload": "ssd", "steps": 20, "data": "/nfs/data"},
    }
    fields.update(over)
    return SweepConfig.model_validate(fields)


def test_config_key_separates_what_changes_the_figure():
    base = config_key(cfg())
    assert config_key(cfg()) == base
    assert config_key(cfg(dataset_path="/nvme/data")) != base  # another storage under test
    assert config_key(cfg(train={"workload": "ssd", "steps": 200, "data": "/nfs/data"})) != base
    assert config_key(cfg(train={"workload": "ssd", "steps": 20, "warmup_steps": 9, "data": "/nfs/data"})) != base
    assert config_key(cfg(launcher="slurm", partition="gpu")) != base
    assert config_key(cfg(launcher="ssh", hosts=["n1:2"])) != config_key(cfg(launcher="ssh", hosts=["n2:2"]))


def test_history_chart_draws_only_matching_series_labelled_by_run():
    key = config_key(cfg())
    dates = pd.date_range("2026-01-05", periods=20, freq="W-MON").strftime("%Y-%m-%dT03:00:00")
    rows = []
    for i, d in enumerate(dates):
        rows.append(
            {
                "workload": "ssd",
                "gpus": 2,
                "cluster": "a",
                "config_key": key,
                "valid": True,
                "started_at": d,
                "scaling_efficiency": 0.8 + i / 1000,
            }
        )
        rows.append(
            {
                "workload": "ssd",
                "gpus": 4,
                "cluster": "a",
                "config_key": "other#x",
                "valid": True,
                "started_at": d,
                "scaling_efficiency": 0.3,
            }
        )
        rows.append(
            {
                "workload": "ssd",
                "gpus": 8,
                "cluster": "b",
                "config_key": key,
                "valid": True,
                "started_at": d,
                "scaling_efficiency": 0.2,
            }
        )
    history = pd.DataFrame(rows)
    frame = pd.DataFrame([{"workload": "ssd", "gpus": 2, "cluster": "a", "config_key": key}])
    svg = "".join(_history_chart(history, frame))
    assert "ssd @2" in svg and "ssd @4" not in svg and "ssd @8" not in svg
    # matplotlib's x ticks: the tick mark's x, then its label's text
    ticks = re.findall(r'<g id="xtick_\d+">.*?<use [^>]*x="([\d.]+)".*?>(\d{4}-\d\d-\d\d)</text>', svg, re.S)
    labels = [label for _, label in ticks]
    xs = [float(x) for x, _ in ticks]
    assert labels and labels == sorted(labels)
    # each label sits where its own run is: spacing is proportional to the run's index
    positions = [list(dates.str[:10]).index(label) for label in labels]
    step = (xs[-1] - xs[0]) / (positions[-1] - positions[0])
    for x, pos in zip(xs, positions, strict=True):
        assert abs(x - (xs[0] + (pos - positions[0]) * step)) < 1.0
    assert positions[0] == 0 and positions != list(range(len(positions)))  # not the first N dates
