"""A busy loop pinned to the rank's core is named with its process, pid and core; an idle slot is clean."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.metrics.sources.interference import InterferenceSource
from tests.infra.faults import cpu_seconds, wait_for

pytestmark = pytest.mark.rates

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 30: pass\n"
# What each spinner must have run on the core inside the sampled window: the window ends on this, not
# on a fixed sleep, so a loaded machine lengthens the window instead of thinning the evidence.
SPUN_S = 0.5


def spinning(pid: int) -> bool:
    """The process runs the loop (its exec is done: python with -c) and has been given the CPU."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"-c\x00import time" in cmdline and cpu_seconds(pid) > 0.05


def sample_while(spinners: list[int], core: int, root: int | None = None) -> tuple[dict, dict[int, float]]:
    """One interference sample of `core` over a window in which every spinner has run at least SPUN_S
    on it (and at least the source's own minimum interval has passed: its first scan is that sample);
    with each spinner's own share of the core over a window just around the source's, from its CPU time.
    A spinner's share is what the machine gave it (a loaded host's steal took half of it once): the
    source's figure is held to that, not to a fixed fraction of the core."""
    for pid in spinners:
        wait_for(lambda pid=pid: spinning(pid), 30, 0.05, f"spinner {pid} running its loop")
    start, before = time.monotonic(), {pid: cpu_seconds(pid) for pid in spinners}
    source = InterferenceSource(cores=[core], root=root)
    wait_for(
        lambda: all(cpu_seconds(pid) - before[pid] >= SPUN_S for pid in spinners),
        60,
        0.05,
        f"each of {spinners} given {SPUN_S} s of core {core}",
    )
    sample = wait_for(
        lambda: (s := source.sample())["foreign_cpu_share"] is not None and s, 30, 0.05, "the source's first scan"
    )
    wall = time.monotonic() - start
    return sample, {pid: (cpu_seconds(pid) - before[pid]) / wall for pid in spinners}


def test_a_foreign_busy_loop_on_the_slot_core_is_named():
    core = sorted(os.sched_getaffinity(0))[-1]
    # Started the way a neighbour is: not a child of this process (its shell exits, it is re-parented).
    spawn = f"taskset -c {core} {sys.executable} -c '{SPIN}' >/dev/null 2>&1 & echo $!"
    pid = int(subprocess.run(["sh", "-c", spawn], capture_output=True, text=True, check=True).stdout)
    try:
        sample, spun = sample_while([pid], core)
    finally:
        os.kill(pid, 9)
    # the loop's share of the core, all of it foreign (and anything else foreign on the core besides)
    assert sample["foreign_cpu_share"] >= 0.8 * spun[pid] > 0, (sample, spun)
    assert f"pid {pid}" in sample["foreign_top"] and f"core {core}" in sample["foreign_top"], sample


def test_the_ranks_own_children_are_not_foreign():
    core = sorted(os.sched_getaffinity(0))[0]
    child = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", SPIN])  # like a loader worker
    try:
        sample, _ = sample_while([child.pid], core)
    finally:
        child.kill()
        child.wait()
    assert sample["foreign_top"] is None or f"pid {child.pid}" not in sample["foreign_top"], sample


@pytest.mark.parametrize(("flag", "name"), [("--spec", "train.json"), ("--metrics-out", "metrics")])
def test_the_runs_other_ranks_are_not_foreign(tmp_path, flag, name):
    """Another rank of the same run (an unpinned sibling, or a namespace host on this kernel) on the slot's
    core is the run's own contention, not a neighbour; a process of another run is. A launched rank is
    marked by its run's `--spec` file (its command line has no --metrics-out: CI caught every node and
    network cause read as `interference` when the launchers moved to --spec), one started by hand by its
    `--metrics-out` folder."""
    core = sorted(os.sched_getaffinity(0))[0]
    marker = str(tmp_path / "run-a" / name)
    script = SPIN + "import sys\n"
    me = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", flag, marker])
    peer = f"taskset -c {core} {sys.executable} -c '{script}' {flag} {marker} >/dev/null 2>&1 & echo $!"
    other = (
        f"taskset -c {core} {sys.executable} -c '{script}' {flag} {tmp_path / 'run-b' / name} >/dev/null 2>&1 & echo $!"
    )
    pids: list[int] = []
    try:
        pids = [
            int(subprocess.run(["sh", "-c", c], capture_output=True, text=True, check=True).stdout)
            for c in (peer, other)
        ]
        sample, spun = sample_while(pids, core, root=me.pid)
    finally:
        me.kill()
        me.wait()
        for pid in pids:
            os.kill(pid, 9)
    assert f"pid {pids[1]}" in sample["foreign_top"], sample  # the other run's spinner is named
    assert f"pid {pids[0]}" not in sample["foreign_top"], sample
    # only the other run's share of the core counts, not the peer's beside it (with a margin for the
    # box's own background on the core)
    assert sample["foreign_cpu_share"] < spun[pids[1]] + 0.5 * spun[pids[0]], (sample, spun)


def test_another_users_process_naming_the_runs_spec_is_still_foreign(tmp_path):
    """The run marker is a path anyone can write into a command line: a process of another user that
    carries the run's `--spec` is a neighbour, not one of the run's ranks (a run's ranks are one job's,
    one user's), so its CPU on the slot is charged and it is named."""
    core = sorted(os.sched_getaffinity(0))[0]
    marker = str(tmp_path / "run-a" / "train.json")
    me = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--spec", marker])
    # the system interpreter: this one lives under /root, which another user cannot enter
    spoof = (
        f"setpriv --reuid=65534 --regid=65534 --clear-groups taskset -c {core} /usr/bin/python3 -c '{SPIN}' "
        f"--spec {marker} >/dev/null 2>&1 & echo $!"
    )
    pid = None
    try:
        pid = int(subprocess.run(["sh", "-c", spoof], capture_output=True, text=True, check=True).stdout)
        sample, _ = sample_while([pid], core, root=me.pid)
    finally:
        me.kill()
        me.wait()
        if pid is not None:
            os.kill(pid, 9)
    assert sample["foreign_top"] and f"pid {pid}" in sample["foreign_top"], sample
