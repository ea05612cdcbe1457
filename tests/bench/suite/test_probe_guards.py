"""What the multi-node probe refuses to count: levels that re-read files or read too briefly, nodes whose
clock is out of step with the worker's, and node results that are malformed or come from an older
install. Rules as pure functions over node documents, plus one real two-process probe on this host."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from bench.config.models import SuiteSettings
from bench.data.generate import GenerateSpec, generate
from bench.data.stage import stage
from bench.errors import DatasetError
from bench.launch.commands import CommandRunner
from bench.launch.python import node_python
from bench.launch.sshopts import SshOptions
from bench.storage.fio_probe import MIN_LEVEL_S, ProbeError
from bench.suite.node_probe import (
    LATE_SHARE,
    ClimbDoc,
    NodeOutput,
    ShareDoc,
    SlurmNodes,
    _communicate,
    judge_level,
    node_doc,
    probe_nodes,
    startup_s,
)

LAUNCHED, SECONDS = 1_000.0, 2.0


def share_doc(host: str, **changes) -> dict:
    """A node's result as bench.storage.fio_probe's main prints it: started at the start-at (LAUNCHED + 1 s on a
    clock in step), read for SECONDS, reported 0.1 s later."""
    doc = {
        "jobs": 2,
        "mb_s": 50.0,
        "bytes": 100_000_000,
        "seconds": SECONDS,
        "fresh": True,
        "host": host,
        "share": 0,
        "of": 2,
        "started_at": LAUNCHED + 1.0,
        "late_s": 0.0,
        "method": "direct",
        "next_offset": 10,
        "process_started_at": LAUNCHED + 0.3,
        "reported_at": LAUNCHED + 1.0 + SECONDS + 0.1,
    }
    return doc | changes


def shift(doc: dict, by: float) -> dict:
    """The same node with its clock `by` seconds ahead of the worker's."""
    return doc | {k: doc[k] + by for k in ("started_at", "process_started_at", "reported_at")}


RECEIVED = LAUNCHED + 1.0 + SECONDS + 0.2  # the worker's clock when it had each node's result


def judged(*docs: dict) -> dict:
    return judge_level(len(docs), list(docs), LAUNCHED, [RECEIVED] * len(docs), SECONDS)


def test_a_level_counts_only_when_every_node_read_fresh_for_long_enough_in_step():
    assert judged(share_doc("a"), share_doc("b"))["conclusive"]
    stale = judged(share_doc("a"), share_doc("b", fresh=False))
    assert not stale["conclusive"] and "node b re-read files" in stale["reason"] and "at 2 nodes" in stale["reason"]
    short = judged(share_doc("a", seconds=MIN_LEVEL_S / 2), share_doc("b"))
    assert not short["conclusive"] and "node a read for 0.50 s" in short["reason"]
    late = judged(share_doc("a"), share_doc("b", late_s=LATE_SHARE * SECONDS * 2))
    assert not late["conclusive"] and "node b started 0.40 s after" in late["reason"]


def test_a_node_whose_clock_is_out_of_step_is_named_and_its_level_not_counted():
    # 5 s ahead: it slept until its own clock read the start-at, so it read 5 s before the other node,
    # yet its started_at and late_s look exactly right; its report time lies after the worker got it
    ahead = judged(share_doc("a"), shift(share_doc("b"), 5.0))
    assert not ahead["conclusive"] and "node b reported times outside" in ahead["reason"], ahead["reason"]
    assert "node a" not in ahead["reason"]
    # 5 s behind: it started its process before the worker launched the level, by its clock
    behind = judged(shift(share_doc("a"), -5.0), share_doc("b"))
    assert not behind["conclusive"] and "node a reported times outside" in behind["reason"]
    # within LATE_SHARE of a level either way: in step
    assert judged(shift(share_doc("a"), 0.05), shift(share_doc("b"), -0.05))["conclusive"]


def test_the_lead_time_is_measured_on_the_workers_clock_alone():
    # the node's clock 100 s ahead: its own timestamps give how long it ran (2 s), the worker's its round
    # trip (3 s); start-up is the 1 s between, whatever the offset
    climb = {"extra": {"process_started_at": 5_100.0, "reported_at": 5_102.0}}
    assert startup_s(climb, 5_000.0, 5_003.0) == pytest.approx(1.0)
    assert startup_s({"extra": {"process_started_at": 5_100.0}}, 5_000.0, 5_003.0) == 0.0


def test_a_malformed_or_older_nodes_result_is_a_probe_error_naming_it(tmp_path):
    missing = json.dumps({k: v for k, v in share_doc("a").items() if k != "started_at"})
    with pytest.raises(ProbeError, match="node n1: result field 'started_at'"):
        node_doc(NodeOutput("n1", 0, missing + "\n", ""), model=ShareDoc)
    with pytest.raises(ProbeError, match="node n1: result field 'levels'"):
        node_doc(NodeOutput("n1", 0, json.dumps({"ceiling_mb_s": 1.0, "levels": 3}) + "\n", ""), model=ClimbDoc)
    # an older node that does not know an argument: argparse's usage error (exit 2), not the dataset
    argv = [sys.executable, "-m", "bench.storage.probe_cli", "--path", str(tmp_path), "--argument-from-the-future", "1"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (usage,) = _communicate({"old": proc}, 60)
    assert usage.returncode == 2
    with pytest.raises(ProbeError, match=r"node old: the node refused its arguments .*argument-from-the-future"):
        node_doc(usage)
    # the same exit code for an unreadable dataset stays a DatasetError
    proc = subprocess.Popen(
        argv[:5], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    (unstaged,) = _communicate({"n2": proc}, 60)
    with pytest.raises(DatasetError, match=r"node n2: .*not a staged dataset"):
        node_doc(unstaged)


def test_nodes_run_the_interpreter_the_launchers_ranks_run(tmp_path):
    cfg = SuiteSettings(workloads=["ssd"], gpus=[1], launcher="slurm").sweep_config(tmp_path, tmp_path / "out")
    through_login = CommandRunner(SshOptions(), login_host="login1")
    assert SlurmNodes(through_login, cfg, 2).python == "python3" == node_python(None, True)
    assert SlurmNodes(CommandRunner(), cfg, 2).python == sys.executable == node_python()
    assert node_python("/opt/py/bin/python", True) == "/opt/py/bin/python"


@dataclass
class TwoLocalProcesses:
    """Two nodes that are two processes on this host (as LocalNodes runs one): the real probe command."""

    names: list[str] = field(default_factory=lambda: ["here-0", "here-1"])
    python: str = field(default_factory=node_python)

    def run(self, count: int, argv_for, timeout: float) -> list[NodeOutput]:
        pipes = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        procs = {self.names[i]: subprocess.Popen(argv_for(f"{i}/{count}"), **pipes) for i in range(count)}
        return _communicate(procs, timeout)


def test_a_level_that_re_read_its_files_is_left_out_of_the_curve(tmp_path):
    """Real fio on a dataset far smaller than a level reads: every node wraps round its share (not fresh),
    so the 2-node level is named in `left_out` and neither `aggregate` nor `bound` rests on it."""
    generate(GenerateSpec("coco", tmp_path / "src", images=8, min_side=200, max_side=300, seed=1))
    stage(tmp_path / "src", tmp_path / "data" / "coco")
    settings = {"workloads": ["ssd"], "gpus": [1, 2], "dataset_path": str(tmp_path / "data")}
    cfg = SuiteSettings(**settings, probe_max_jobs=1, probe_seconds=1.0).sweep_config(tmp_path, tmp_path / "out")
    doc = probe_nodes(cfg, TwoLocalProcesses())
    (level,) = doc["node_levels"]
    assert not level["conclusive"] and "re-read files" in level["reason"], level
    assert doc["left_out"] == [{"nodes": 2, "reason": level["reason"]}]
    assert [a["nodes"] for a in doc["aggregate"]] == [1] and doc["bound"] == "client"
