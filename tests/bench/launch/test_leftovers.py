"""Leftover runs of a suite are cancelled, and only those: real local runs, real processes, a real Slurm.

A handle planted in the suite's folder (issue 61 item 3) is never acted on: neither a job id that is an
option (`--user=airflow`: every job of the account), nor an output folder elsewhere (where the cancel
would write `cancel.request`), nor a FIFO at handle.json (which hung the sweep)."""

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.config.models import RunSpec, TrainConfig
from bench.launch.base import RunState, wait
from bench.launch.leftovers import HANDLE_FILE, cancel_unfinished, record_handle, recorded_handles, submit_recorded
from bench.launch.registry import build_launcher
from bench.launch.supervisor import CANCEL_REQUEST
from bench.suite.plan import run_prefix
from tests.bench.launch.conftest import idle
from tests.infra.faults import train_pids, wait_for
from tests.infra.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
# The suite's run ids as the plan makes them: its prefix, then the run folder's name.
PREFIX = run_prefix("scheduled__2026-01-05T03:00:00+00:00")
NONCE = "0123456789abcdef0123456789abcdef"


def spec(suite, datasets, name: str, steps: int) -> RunSpec:
    train = TrainConfig(workload="ssd", data=datasets["coco"], steps=steps, batch_size=4, sample_interval_s=0.2)
    return RunSpec(run_id=PREFIX + name, train=train, ranks=2, output_dir=suite / name)


def idle_spec(suite, records, name: str) -> RunSpec:
    """One rank that waits instead of computing: a leftover that costs the machine nothing."""
    train = TrainConfig(**idle(records), batch_size=4, sample_interval_s=0.2)
    return RunSpec(run_id=PREFIX + name, train=train, ranks=1, output_dir=suite / name)


def planted(suite: Path, name: str, **fields) -> dict:
    """A handle written into suite/name as if by this suite's submit, with `fields` as the planter chose."""
    handle = {"backend": "local", "run_id": PREFIX + name, "output_dir": str(suite / name), "ranks": 1}
    handle |= {"nonce": NONCE, "submitted": time.time()} | fields
    (suite / name).mkdir(parents=True, exist_ok=True)
    (suite / name / HANDLE_FILE).write_text(json.dumps(handle))
    return handle


def test_a_live_run_of_the_suite_is_cancelled_before_the_next_scale_starts(tmp_path, datasets):
    launcher = build_launcher("local")
    suite = tmp_path / "suite"
    left = spec(suite, datasets, "left-1", steps=100_000)
    left_handle = submit_recorded(launcher, left)
    assert json.loads((left.output_dir / HANDLE_FILE).read_text()) == left_handle
    wait_for(lambda: train_pids(left.output_dir), 60)

    following = spec(suite, datasets, "next-2", steps=4)
    handle = submit_recorded(launcher, following)
    assert train_pids(left.output_dir) == []  # gone before the next scale was submitted
    assert launcher.poll(left_handle)[0] == RunState.CANCELLED
    assert wait(launcher, handle, 180, 0.3)[0] == RunState.COMPLETED
    assert cancel_unfinished(launcher, suite, PREFIX) == []  # finished and cancelled runs are left alone


def test_a_reused_pid_or_an_unreadable_handle_is_never_acted_on(tmp_path):
    launcher = build_launcher("local")
    suite = tmp_path / "suite"
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        handle = {
            "backend": "local",
            "run_id": PREFIX + "gone-1",
            "output_dir": str(suite / "gone-1"),
            "job_id": str(stranger.pid),  # the supervisor's pid, now someone else's
            "ranks": 1,
            "submitted": 0.0,
            "nonce": NONCE,
        }
        record_handle(handle)
        assert recorded_handles(suite, PREFIX) == [handle]  # valid: it is the pid check that must refuse it
        (suite / "torn-2").mkdir()
        (suite / "torn-2" / HANDLE_FILE).write_text('{"backend": "lo')
        assert launcher.poll(handle)[0] == RunState.FAILED
        assert cancel_unfinished(launcher, suite, PREFIX) == []
        assert stranger.poll() is None  # still running: not signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_planted_handles_are_skipped_and_the_suites_own_leftover_is_still_cancelled(tmp_path, records):
    """Beside a real leftover: a handle whose job id is `--user=airflow`, and one whose output folder is a
    victim's (its `where` forged so the cancel would go by the folder, and its submit time recent so the
    missing state file reads PENDING). The sweep cancels the leftover only: it neither raises on the
    option, nor writes `cancel.request` into the victim, nor signals the pid named beside the victim."""
    launcher = build_launcher("local")
    suite, victim = tmp_path / "suite", tmp_path / "victim"
    victim.mkdir()
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        left = idle_spec(suite, records, "left-2")
        left_handle = submit_recorded(launcher, left)
        wait_for(lambda: train_pids(left.output_dir), 60)
        planted(suite, "user-3", job_id="--user=airflow")
        where = {"pid_ns": "pid:[1]", "boot_id": "another-boot", "host": "another-host"}
        planted(suite, "elsewhere-1", job_id=str(stranger.pid), output_dir=str(victim), where=where)
        assert cancel_unfinished(launcher, suite, PREFIX) == [PREFIX + "left-2"]
        assert not (victim / CANCEL_REQUEST).exists() and list(victim.iterdir()) == []
        assert stranger.poll() is None  # not signalled
        assert launcher.poll(left_handle)[0] == RunState.CANCELLED
        wait_for(lambda: not train_pids(left.output_dir), 60)
    finally:
        stranger.kill()
        stranger.wait()


SWEEP = """
import sys
from pathlib import Path
from bench.launch.leftovers import cancel_unfinished
from bench.launch.registry import build_launcher
print(cancel_unfinished(build_launcher("local"), Path(sys.argv[1]), sys.argv[2]))
"""


def test_a_fifo_at_handle_json_does_not_hang_the_sweep(tmp_path):
    """A FIFO with no writer at a run's handle.json: reading it would block for ever. The sweep (in its own
    process, so that a hang is a timeout here and not a stuck test) returns, having cancelled nothing."""
    import os

    suite = tmp_path / "suite"
    (suite / "fifo-1").mkdir(parents=True)
    os.mkfifo(suite / "fifo-1" / HANDLE_FILE)
    done = subprocess.run(
        [sys.executable, "-c", SWEEP, str(suite), PREFIX],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert "fifo-1/handle.json" in done.stderr and "not a regular file" in done.stderr


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield c
    c.stop()


def test_a_planted_slurm_handle_never_cancels_another_job(cluster, tmp_path):
    """Two handles planted for this suite's Slurm runs, beside a job of the same account that is not this
    suite's: one names the job id `--user=<account>` (scancel's every job of the account), the other that
    job's number with the run id its name carries (sw-<run id>), another suite's. Neither is returned to
    act on, and the sweep leaves the job running."""
    launcher = build_launcher("slurm", slurm_env=cluster.env)
    other_run = run_prefix("scheduled__2026-01-04T03:00:00+00:00") + "ssd-2"
    argv = ["sbatch", "--parsable", "-p", "test", "-J", f"sw-{other_run}", "-o", "/dev/null", "--wrap", "sleep 300"]
    job = cluster.run(*argv).stdout.strip().split(";")[0]
    try:
        wait_for(lambda: any(line.split() == [job, "RUNNING"] for line in cluster.queue()), 60)
        planted(tmp_path, "ssd-1", backend="slurm", job_id=f"--user={getpass.getuser()}")
        planted(tmp_path, "ssd-2", backend="slurm", job_id=job, run_id=other_run)
        assert recorded_handles(tmp_path, PREFIX) == []  # refused before any launcher is called
        assert cancel_unfinished(launcher, tmp_path, PREFIX) == []
        assert [line.split() for line in cluster.queue()] == [[job, "RUNNING"]]
    finally:
        cluster.run("scancel", job, check=False)
        wait_for(lambda: not cluster.queue(), 60)
