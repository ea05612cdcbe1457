"""Issue 49 item 3: a figure whose own validity rule fails (epoch-1 reads too short for a rate) is an
inconclusive figure that says why, never a failed expectation of its row."""

from __future__ import annotations

import pandas as pd

from bench.analysis.verdict.evaluate import figure_warnings
from bench.analysis.verdict.expectations import BANDWIDTH_NOT_CACHE_DISTORTED
from bench.metrics.summary import bandwidth_note

SHORT = {"cache_distorted": False, "seconds": 4.3, "bytes_from_storage": 1.0, "bytes_consumed": 1.0}


def test_a_read_too_short_for_a_rate_is_an_inconclusive_figure_with_its_reason():
    note = bandwidth_note(SHORT, synthetic=False, risk=False, drop="done")
    assert "too short for a rate" in note
    frame = pd.DataFrame([{"workload": "ssd", "gpus": 1, "bandwidth_note": note}])
    warning = {"workload": "ssd", "gpus": 1, "expectation": BANDWIDTH_NOT_CACHE_DISTORTED, "value": False}
    (out,) = figure_warnings([warning], frame)
    assert out["reason"] == f"epoch-1 read figure inconclusive: {note}"
    other = {"workload": "ssd", "gpus": 1, "expectation": "Other", "value": 1}
    assert figure_warnings([other], frame) == [other]
