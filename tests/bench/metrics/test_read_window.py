"""Epoch 1's read rate over the steps the throughput is measured on (issue 62 item 3): a compute-bound
scale reads as fast as it computes, so neither the start-up burst nor a full epoch's drained prefetch may
move its rate. Recorded counter timelines, checked in a second; real ranks: tests/scripts/test_run_once.py."""

from __future__ import annotations

import pytest

from bench.metrics.io import dataset_epochs, epoch_io, measured_span

# One rank's cumulative dataset bytes: a 20 MB prefetch burst in the first second, nothing while the
# warm-up compiles (1-3 s), then 2 MB/s until 12 s; the last second's steps eat the prefetched batches.
TIMELINE = (
    [{"t": 0.0, "read_bytes": 0}, {"t": 1.0, "read_bytes": 20e6}, {"t": 3.0, "read_bytes": 20e6}]
    + [{"t": 3.0 + k, "read_bytes": 20e6 + 2e6 * k} for k in range(1, 10)]
    + [{"t": 13.0, "read_bytes": 38e6}]
)


def test_the_rate_is_the_measured_steps_consumption_times_the_share_storage_served():
    whole = epoch_io([TIMELINE], 1, 0.0, 13.0, 38e6, 1.0)
    assert whole.read_window == "whole epoch" and whole.avg_read_mb_s == pytest.approx(38 / 13)
    # the measured steps ran 10 s and consumed 2.2 MB/s; storage served every byte consumed
    measured = epoch_io([TIMELINE], 1, 0.0, 13.0, 38e6, 1.0, measured=(2.2e6, 10.0))
    assert measured.read_window == "measured steps" and measured.read_window_s == pytest.approx(10.0)
    assert measured.avg_read_mb_s == pytest.approx(2.2) and measured.whole_epoch_read_mb_s == pytest.approx(38 / 13)
    # the peak and the cache accounting stay over the whole epoch
    assert measured.peak_read_mb_s == pytest.approx(20.0) and measured.bytes_from_storage == 38e6
    # a quarter of the consumed bytes came from the page cache: a quarter of the rate is not the storage's
    cached = epoch_io([TIMELINE], 1, 0.0, 13.0, 38e6 / 0.75, 1.0, measured=(2.2e6, 10.0))
    assert cached.avg_read_mb_s == pytest.approx(2.2 * 0.75) and cached.cache_distorted
    # more served than consumed (a partial epoch's prefetch past its last step) is no rate the steps drew
    over = epoch_io([TIMELINE], 1, 0.0, 13.0, 36e6, 1.0, measured=(2.2e6, 10.0))
    assert over.avg_read_mb_s == pytest.approx(2.2)


def test_a_measured_stretch_too_short_for_a_rate_keeps_the_whole_epoch():
    late = epoch_io([TIMELINE], 1, 0.0, 13.0, 38e6, 1.0, measured=(2.2e6, 4.0))  # under 5 s
    assert late.read_window == "whole epoch" and late.avg_read_mb_s == pytest.approx(38 / 13)
    half = epoch_io([TIMELINE], 1, 0.0, 13.0, 38e6, 1.0, measured=(2.2e6, 6.0))  # 6 s, under half of 13 s
    assert half.read_window == "whole epoch"


def _report(rank: int, measured_s: float, consumed: float) -> dict:
    mark = {"epoch": 1, "start": 0.0, "end": 13.0, "seconds": 13.0, "images": 100, "consumed": 19e6,
            "read_bytes": 19e6, "measured_s": measured_s, "measured_consumed": consumed}  # fmt: skip
    return {"rank": rank, "host": "n1", "epoch_marks": [mark], "samples": TIMELINE if rank == 0 else []}


def test_the_ranks_rates_add_up_and_every_rank_must_have_measured():
    epochs, source, _ = dataset_epochs([_report(0, 10.0, 11e6), _report(1, 8.0, 9.6e6)], 1.0)
    first = epochs[0]
    assert source == "procio" and first["read_window"] == "measured steps", first
    assert first["read_window_s"] == pytest.approx(8.0) and first["avg_read_mb_s"] == pytest.approx(1.1 + 1.2)
    epochs, _, _ = dataset_epochs([_report(0, 10.0, 11e6), _report(1, 0.0, 0)], 1.0)  # rank 1 still warming up
    assert epochs[0]["read_window"] == "whole epoch", epochs[0]
    assert epochs[0]["avg_read_mb_s"] == pytest.approx(38 / 13)


def test_the_steps_images_are_priced_at_the_epochs_mean_image_size():
    """Variable-size images: the measured steps happened to draw smaller ones than the epoch's mean (as
    a scale's measured steps differ from another's); the rate is their images/s x the epoch's mean size,
    so a compute-bound scale's bandwidth follows its images/s, not which images it drew."""
    marks = [
        {"measured_s": 10.0, "measured_consumed": 9e6, "measured_images": 60, "images": 100, "consumed": 19e6},
        {"measured_s": 8.0, "measured_consumed": 7e6, "measured_images": 40, "images": 90, "consumed": 19e6},
    ]
    rate, ran = measured_span(marks)
    assert ran == pytest.approx(8.0)
    assert rate == pytest.approx((60 / 10.0 + 40 / 8.0) * 38e6 / 190)  # 11 images/s at 200 kB: 2.2 MB/s
    # marks without images (synthetic data, or written before the field) keep the steps' own bytes
    assert measured_span([{**m, "measured_images": None} for m in marks])[0] == pytest.approx(0.9e6 + 0.875e6)
    assert measured_span([{**m, "images": None} for m in marks])[0] == pytest.approx(0.9e6 + 0.875e6)
