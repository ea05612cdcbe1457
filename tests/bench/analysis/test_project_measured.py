"""`bench project` against what ran: 1, 2 and 4 ranks over two namespace hosts with a rate-limited link
and a blkio-throttled store, projected from the 1-rank ceilings (tests/infra/projection_check.py). This
is its short run, the same path: which component binds where, and figures that come from what ran under
the limits. Benchmark section 14 runs it at full length and holds each projection to 15% of what ran."""

from __future__ import annotations

import pytest

from tests.infra.projection_check import SCALES, SHORT, check_projection

pytestmark = [pytest.mark.slow, pytest.mark.rates]


def test_projection_from_one_rank_names_the_store_then_the_link_from_what_was_measured(tmp_path, ssh_hosts):
    p = check_projection(tmp_path / "proj", ssh_hosts, SHORT)
    assert [c.gpus for c in p.checked] == list(SCALES)
    # each component binds where the limits put it: the store on one host, the link across both
    assert [p.at(n).bound_by for n in SCALES] == ["storage", "storage", "communication"], p
    # The projection's inputs were measured under the limits: fio read the throttled store at its throttle,
    # the 2-rank allreduce across the link got most of its line and never more (a loopback or an unlimited
    # link would read far above it), and one rank computes well above what the store feeds.
    assert p.ceiling_mb_s == pytest.approx(p.store_mb_s, rel=0.15), p
    assert 0.5 * p.line_bytes_s < p.link_bytes_s <= 1.02 * p.line_bytes_s, p
    assert p.compute_img_s > 2 * SHORT.store_img_s, p
    # What ran is what the limits allow: the store's scales near its rate (a run that read past the
    # dataset's end, or around the throttle, would read the page cache far above it), 4 ranks far under
    # it, each of their steps one allreduce through the link.
    for n in (1, 2):
        assert 0.6 * SHORT.store_img_s < p.at(n).measured_img_s < 1.25 * SHORT.store_img_s, p.at(n)
    four = p.at(4)
    assert four.measured_img_s < 0.5 * SHORT.store_img_s, four
    assert four.measured_allreduce_s and four.projected_allreduce_s, four
    assert 0.5 < four.allreduce_error + 1 < 2, four  # the model's allreduce against the run's own probe
    # The projection is the model's, from these inputs: sane at every scale (a unit slip is 8x or 1000x);
    # how close it comes, 15% at each scale, is benchmark section 14's to show at full length.
    for c in p.checked:
        assert abs(c.error) < 0.5, c
