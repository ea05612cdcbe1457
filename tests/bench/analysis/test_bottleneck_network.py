"""Communication-bound, for real: two ssh hosts in network namespaces whose links carry a `tc tbf`
rate limit; the 2-rank scale's exposed communication grows on both ranks and is named as the cause."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.config import HostSlots, RunSpec, SweepConfig, TrainConfig
from bench.launch.base import collect, wait
from bench.launch.registry import build_launcher
from bench.pipeline import evaluate
from tests.infra.ssh_hosts import SshHosts, link_rate_limit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    h = SshHosts(tmp_path_factory.mktemp("ssh-comm")).start()
    yield h
    h.stop()


def run(hosts: SshHosts, tmp_path: Path, data: Path, ranks: int) -> dict:
    train = TrainConfig(workload="ssd", data=data, steps=6, warmup_steps=1, batch_size=8, sample_interval_s=0.25)
    spec = RunSpec(
        run_id=f"comm-ssd-{ranks}",
        train=train,
        ranks=ranks,
        output_dir=tmp_path / f"ssd-{ranks}",
        python=Path(sys.executable),
        hosts=tuple(HostSlots(host=hosts.ip(i)) for i in range(ranks)),
        rendezvous_addr=hosts.gateway,
    )
    launcher = build_launcher("ssh", ssh=hosts.options())
    handle = launcher.submit(spec)
    state, reason = wait(launcher, handle, 600, 0.5)
    result = collect(handle, state, reason, ranks)
    assert result.ok, result.reason
    return {"workload": "ssd", "gpus": ranks, "result": result.as_dict()}


def test_a_rate_limited_network_is_named_communication(hosts, tmp_path, datasets):
    baseline = run(hosts, tmp_path, datasets["coco"], 1)
    links = [f"{hosts.prefix}{i}" for i in range(2)]
    with link_rate_limit(links, "8mbit"):  # ssd's 2.4 MB of gradients per step through 8 Mbit/s links
        limited = run(hosts, tmp_path, datasets["coco"], 2)
    cfg = SweepConfig(
        workloads=("ssd",),
        gpus=(1, 2),
        launcher="ssh",
        hosts=(HostSlots(host=hosts.ip(0)), HostSlots(host=hosts.ip(1))),
        dataset_path=datasets["coco"],
        train=TrainConfig(workload="ssd", data=datasets["coco"], steps=6),
        output_dir=tmp_path,
        probe_storage=False,
    )
    ev = evaluate(cfg, "comm", [baseline, limited], datetime.now(UTC).isoformat())
    two = ev.frame[ev.frame["gpus"] == 2].iloc[0]
    assert two["verdict"] == "fail" and two["bottleneck"] == "communication", two.to_dict()
    ranks = two["rank_breakdown"]
    assert all(r["comm_share"] > 0.3 for r in json.loads(ranks))  # every rank waits alike
    assert "exposed communication" in two["bottleneck_evidence"]
    assert ev.failures and ev.failures[0]["bottleneck"] == "communication"
