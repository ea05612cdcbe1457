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


def test_the_alert_states_a_too_short_figure_as_an_inconclusive_item_of_its_row():
    from bench.analysis.verdict.evaluate import inconclusive_figures
    from scalewatch.notifiers.message import alert_text

    note = bandwidth_note(SHORT, synthetic=False, risk=False, drop="done")
    frame = pd.DataFrame([{"workload": "ssd", "gpus": 1, "bandwidth_note": note}])
    warning = {"workload": "ssd", "gpus": 1, "expectation": BANDWIDTH_NOT_CACHE_DISTORTED, "value": False}
    other = {"workload": "ssd", "gpus": 2, "expectation": "NodeDoesNotStandOut", "value": "10.0.0.2"}
    figures = inconclusive_figures(figure_warnings([warning, other], frame))
    assert figures == [
        {
            "workload": "ssd",
            "gpus": 1,
            "figure": "epoch-1 read rate",
            "reason": f"epoch-1 read figure inconclusive: {note}",
        }
    ]
    failure = {"workload": "ssd", "gpus": 2, "metric": "scaling_efficiency", "value": 0.29, "bound": 0.9}
    lines = alert_text("r1", [failure | {"expectation": "X"}], None, figures=figures).splitlines()
    assert lines[0].endswith("(1 failing figure(s), 0 inconclusive row(s), 1 inconclusive figure(s))"), lines[0]
    assert f"• ssd @ 1 GPUs: epoch-1 read rate INCONCLUSIVE — epoch-1 read figure inconclusive: {note}" in lines
    assert not any("ssd @ 1 GPUs" in line and "FAILED" in line for line in lines)
