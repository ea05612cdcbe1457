"""Annotations: plain-text notes, refused markup and sizes, and the series re-baselined from them."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.analysis.history.annotations import MAX_NOTE_CHARS, Annotation, baseline_since, rebaselined
from bench.config.types import parse
from bench.errors import ConfigError

GOOD = {
    "cluster": "nas-a",
    "workload": "ssd",
    "gpus": 2,
    "config_key": "k1",
    "metric": "throughput_img_s",
    "changed_at": "2026-11-16T03:00:00",
    "kind": "expected",
    "note": "new storage firmware: faster is right (latency < 5 us now)",
}


def test_a_plain_note_is_kept():
    assert parse(Annotation, GOOD).note.startswith("new storage firmware")


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"note": "x" * (MAX_NOTE_CHARS + 1)}, "note"),
        ({"note": "<script>alert(1)</script>"}, "markup"),
        ({"note": "see &lt;here&gt;"}, "markup"),
        ({"note": "bell\x07"}, "control"),
        ({"note": ""}, "note"),
        ({"kind": "ignore"}, "kind"),
        ({"workload": "res net"}, "workload"),  # workload files name series too: any name, never free text
        ({"cluster": "a b"}, "cluster"),
        ({"gpus": 0}, "gpus"),
    ],
)
def test_bad_annotations_are_refused_naming_the_field(change, needle):
    with pytest.raises(ConfigError, match=needle):
        parse(Annotation, GOOD | change)


def test_the_series_rebaselines_from_its_newest_annotated_change():
    notes = pd.DataFrame(
        [GOOD, GOOD | {"changed_at": "2026-11-30T03:00:00"}, GOOD | {"gpus": 4, "changed_at": "2026-12-01"}]
    )
    since = baseline_since(notes, "nas-a", "ssd", 2, "k1")
    assert since == "2026-11-30T03:00:00"
    series = pd.DataFrame({"started_at": ["2026-11-09T03", "2026-11-23T03", "2026-11-30T03:00:00", "2026-12-07T03"]})
    assert rebaselined(series, since)["started_at"].tolist() == ["2026-11-30T03:00:00", "2026-12-07T03"]
    assert baseline_since(notes, "nas-a", "ssd", 1, "k1") is None
    assert len(rebaselined(series, None)) == 4


@pytest.mark.parametrize("breaker", ["\n", "\r", "\r\n", "\u2028", "\u2029", "\x85"])
def test_a_note_with_a_line_break_is_refused_naming_the_field(breaker):
    """A note is one line (issue 48): it reached the store's file, which OpenSSH read as a config and whose
    `Match exec` line it ran; no note may start a line of its own in any file another program reads."""
    with pytest.raises(ConfigError, match="note: one line of plain text; line breaks are not allowed"):
        parse(Annotation, GOOD | {"note": f'new firmware{breaker}Match exec "id > /tmp/owned"'})
    assert parse(Annotation, GOOD | {"note": "new firmware, faster is right\n"}).note.endswith("right")
