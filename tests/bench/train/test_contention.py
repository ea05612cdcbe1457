"""Ranks started outside the suite's launchers (the torchrun env contract, DDP) that share cores are
marked and their figures INCONCLUSIVE; with --bind auto they split the node's cores themselves."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bench.analysis.frame import build_frame, row_from_result
from bench.config.models import Thresholds
from bench.metrics.schema import validate_summary
from tests.bench.train.test_ddp import free_port, torchrun_env
from tests.conftest import BENCH

pytestmark = pytest.mark.slow


def two_plain_ranks(out, *flags: str) -> dict:
    """Two `bench train` processes on this host, unpinned, as torchrun would start them."""
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = os.environ | torchrun_env(rank, port)
        env.pop("SCALEWATCH_SLOT", None)
        argv = [BENCH, "train", "--workload", "ssd", "--synthetic", "--steps", "4", "--batch-size", "4"]
        argv += ["--backend", "ddp", "--sample-interval", "0.2", "--metrics-out", str(out), *flags]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    validate_summary(summary)
    return summary


def verdict_reason(summary: dict) -> str:
    from bench.analysis.verdict.rules import measurement_problems

    result = {"state": "COMPLETED", "summary": summary}
    frame = build_frame([row_from_result("s", "ssd", 2, result, "local", "c", "2026-01-01T00:00:00+00:00")])
    # contention is under test, not interference: beside the suite's other lanes a foreign process can take
    # a share of a rank's cores (CI saw "python (pid N) on core 0 took 48% of rank 0's cores")
    return measurement_problems(frame, Thresholds(max_foreign_share=1.0)).iloc[0]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two disjoint slots need two cores")
def test_plain_ranks_sharing_cores_are_marked_inconclusive_and_bind_auto_splits_them(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    shared = two_plain_ranks(tmp_path / "none")
    assert shared["backend"] == "ddp" and shared["ranks"] == 2
    slots = {r["rank"]: r["slot"] for r in shared["per_rank"]}
    assert slots[0]["cpus"] == slots[1]["cpus"] == cores
    assert slots[0]["shared_with"] == [1] and slots[1]["shared_with"] == [0]
    assert slots[0]["oversubscribed"] and slots[1]["oversubscribed"]
    assert slots[0]["bound_by"] == "none"
    span = f"{cores[0]}-{cores[-1]}"
    host = shared["hosts"][0]
    threads = f"ranks 0, 1 on {host} run {2 * len(cores)} threads on {len(cores)} core(s) {span}"
    assert shared["contention"] == f"ranks 0 and 1 on {host} share cores {span}; {threads}"
    reason = verdict_reason(shared)
    assert reason.startswith("ranks shared cores or a GPU: ") and f"share cores {span}" in reason

    split = two_plain_ranks(tmp_path / "auto", "--bind", "auto")
    slots = {r["rank"]: r["slot"] for r in split["per_rank"]}
    half = len(cores) // 2
    assert slots[0]["cpus"] == cores[:half] and slots[1]["cpus"] == cores[half : 2 * half]
    assert all(s["shared_with"] == [] and not s["oversubscribed"] and s["contention"] == "" for s in slots.values())
    assert all(s["bound_by"] == "scalewatch" and s["bind"] == "auto" and s["threads"] == half for s in slots.values())
    assert split["contention"] == "" and verdict_reason(split) == ""
