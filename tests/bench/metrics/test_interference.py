"""A busy loop pinned to the rank's core is named with its process, pid and core; an idle slot is clean."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.metrics.sources.interference import InterferenceSource

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 30: pass\n"


def sample_beside(pid: int, core: int) -> dict:
    """One interference sample of `core` over 1.5 s while `pid` spins on it; the spinner is killed after."""
    try:
        time.sleep(0.5)
        source = InterferenceSource(cores=[core])
        time.sleep(1.5)
        return source.sample()
    finally:
        os.kill(pid, 9)


def test_a_foreign_busy_loop_on_the_slot_core_is_named():
    core = sorted(os.sched_getaffinity(0))[-1]
    # Started the way a neighbour is: not a child of this process (its shell exits, it is re-parented).
    spawn = f"taskset -c {core} {sys.executable} -c '{SPIN}' >/dev/null 2>&1 & echo $!"
    pid = int(subprocess.run(["sh", "-c", spawn], capture_output=True, text=True, check=True).stdout)
    sample = sample_beside(pid, core)
    assert sample["foreign_cpu_share"] > 0.5, sample  # the loop takes most of the core
    assert f"pid {pid}" in sample["foreign_top"] and f"core {core}" in sample["foreign_top"], sample


def test_the_ranks_own_children_are_not_foreign():
    core = sorted(os.sched_getaffinity(0))[0]
    child = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", SPIN])  # like a loader worker
    sample = sample_beside(child.pid, core)
    child.wait()
    assert sample["foreign_top"] is None or f"pid {child.pid}" not in sample["foreign_top"], sample


def test_the_runs_other_ranks_are_not_foreign(tmp_path):
    """Another rank of the same run (same --metrics-out: an unpinned sibling, or a namespace host on this
    kernel) on the slot's core is the run's own contention, not a neighbour; a process of another run is."""
    core = sorted(os.sched_getaffinity(0))[0]
    marker = str(tmp_path / "run-a")
    script = SPIN + "import sys\n"
    me = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--metrics-out", marker])
    peer = f"taskset -c {core} {sys.executable} -c '{script}' --metrics-out {marker} >/dev/null 2>&1 & echo $!"
    other = (
        f"taskset -c {core} {sys.executable} -c '{script}' --metrics-out {tmp_path / 'run-b'} >/dev/null 2>&1 & echo $!"
    )
    try:
        pids = [
            int(subprocess.run(["sh", "-c", c], capture_output=True, text=True, check=True).stdout)
            for c in (peer, other)
        ]
        time.sleep(0.5)
        source = InterferenceSource(cores=[core], root=me.pid)
        time.sleep(1.5)
        sample = source.sample()
    finally:
        me.kill()
        for pid in pids:
            os.kill(pid, 9)
    assert f"pid {pids[1]}" in sample["foreign_top"], sample  # the other run's spinner is named
    assert f"pid {pids[0]}" not in sample["foreign_top"], sample
    assert sample["foreign_cpu_share"] < 0.8, sample  # only the other run's half of the core counts
