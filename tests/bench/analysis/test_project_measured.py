"""`bench project` against what ran: 1, 2 and 4 ranks over two namespace hosts with a rate-limited link
and a blkio-throttled store, projected from the 1-rank ceilings (tests/infra/projection_check.py;
benchmark section 14 repeats it and reports the spread)."""

from __future__ import annotations

import pytest

from tests.infra.projection_check import SCALES, TOLERANCE, check_projection
from tests.infra.ssh_hosts import SshHosts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    h = SshHosts(tmp_path_factory.mktemp("ssh-proj"), prefix="swbq").start()
    yield h
    h.stop()


def test_projection_from_one_rank_holds_within_15_percent_at_1_2_and_4_ranks(tmp_path, hosts):
    checked = {c.gpus: c for c in check_projection(tmp_path / "proj", hosts)}
    assert sorted(checked) == list(SCALES)
    # each component binds where the limits put it: the store on one host, the link across both
    assert [checked[n].bound_by for n in SCALES] == ["storage", "storage", "communication"]
    for n in SCALES:
        c = checked[n]
        assert abs(c.error) <= TOLERANCE, (
            f"{n} rank(s): projected {c.projected_img_s:.2f} images/s, measured {c.measured_img_s:.2f}"
        )
