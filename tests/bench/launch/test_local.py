import signal

import pytest

from bench.config.models import RunSpec, TrainConfig
from bench.launch.base import RunState, collect, wait
from bench.launch.registry import build_launcher
from tests.bench.launch.conftest import idle
from tests.infra.configs import changed
from tests.infra.faults import any_pids, kill_rank_when_training, slots_while_training, train_pids, wait_for

pytestmark = pytest.mark.slow


def spec(tmp_path, datasets, **over) -> RunSpec:
    train = TrainConfig(
        workload=over.pop("workload", "ssd"),
        data=over.pop("data", datasets["coco"]),
        steps=over.pop("steps", 4),
        batch_size=4,
        sample_interval_s=0.2,
        backend=over.pop("backend", "auto"),
        accelerator_s=over.pop("accelerator_s", None),
    )
    ranks = over.pop("ranks", 2)
    return RunSpec(run_id=over.pop("run_id", "loc"), train=train, ranks=ranks, output_dir=tmp_path / "run", **over)


@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_two_local_ranks_complete_each_on_its_own_slot(tmp_path, datasets, backend):
    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, steps=30, backend=backend)
    handle = launcher.submit(s)
    live = slots_while_training(s.output_dir, 2)
    state, reason = wait(launcher, handle, 180, 0.3)
    result = collect(handle, state, reason, 2)
    assert result.ok, result.reason
    assert result.exit_codes == {0: 0, 1: 0}
    assert result.summary["ranks"] == 2
    recorded = {r["rank"]: r["slot"]["cpus"] for r in result.summary["per_rank"]}
    assert live == recorded  # what the kernel enforced is what the summary says
    assert not set(recorded[0]) & set(recorded[1])  # one core each, not shared
    assert all(
        not r["slot"]["oversubscribed"] and r["slot"]["bound_by"] == "scalewatch" for r in result.summary["per_rank"]
    )
    assert result.summary["backend"] == backend and result.summary["contention"] == ""
    assert all(r["slot"]["shared_with"] == [] for r in result.summary["per_rank"])
    assert all(r["breakdown"]["comm_s"] > 0 for r in result.summary["per_rank"])  # the exposed wait, measured


@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_killed_rank_fails_run_names_rank_and_stops_others(tmp_path, datasets, backend):
    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, steps=5000, run_id="kill", backend=backend)
    handle = launcher.submit(s)
    kill_rank_when_training(s.output_dir, rank=1)
    state, reason = wait(launcher, handle, 120, 0.3)
    result = collect(handle, state, reason, 2)
    assert result.state == RunState.FAILED
    assert "rank 1 on localhost" in result.reason
    assert result.exit_codes[1] == -signal.SIGKILL
    assert result.summary is None and not (s.output_dir / "metrics" / "summary.json").exists()
    assert train_pids(s.output_dir) == []  # no orphans
    assert any_pids(b"bench.launch.rank\x00--tag\x00kill") == []


def test_cancel_and_timeout(tmp_path, datasets, records):
    # idle ranks: what is judged is the launcher's cancel and time limit, not training
    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, run_id="cancel", **idle(records))
    handle = launcher.submit(s)
    wait_for(lambda: train_pids(s.output_dir), 60)
    launcher.cancel(handle)
    state, reason = launcher.poll(handle)
    assert state == RunState.CANCELLED
    assert train_pids(s.output_dir) == []
    t = spec(tmp_path / "t", datasets, run_id="timeout", time_limit_s=10, **idle(records))
    handle = launcher.submit(t)
    # The supervisor ends the run at its own 10 s limit; were it not to, this wait's 60 s deadline would
    # cancel it instead and say so ("no result within 60s; cancelled"), which is not the limit's reason.
    state, reason = wait(launcher, handle, 60, 0.3)
    assert state == RunState.TIMEOUT and "time limit 10" in reason, reason
    assert collect(handle, state, reason, 2).summary is None


def _poll_in_new_pid_namespace(handle: dict) -> str:
    """Poll the run from another pid namespace, as a triggerer in its own container would."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys; from bench.launch.registry import build_launcher; "
        "print(build_launcher('local').poll(json.loads(sys.argv[1]))[0])"
    )
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code, json.dumps(handle)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_poll_from_another_pid_namespace_reads_the_truth(tmp_path, datasets):
    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, steps=60, run_id="pidns")
    handle = launcher.submit(s)
    wait_for(lambda: launcher.poll(handle)[0] == RunState.RUNNING, 60)
    assert _poll_in_new_pid_namespace(handle) == "RUNNING"  # the supervisor's pid is invisible there
    state, reason = wait(launcher, handle, 240, 0.3)
    assert state == RunState.COMPLETED, reason
    assert _poll_in_new_pid_namespace(handle) == "COMPLETED"


def test_cancel_from_another_pid_namespace_reaches_the_run(tmp_path, datasets):
    import json
    import subprocess
    import sys

    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, steps=5000, run_id="pidnscancel")
    handle = launcher.submit(s)
    wait_for(lambda: train_pids(s.output_dir), 60)
    code = "import json, sys; from bench.launch.registry import build_launcher; "
    code += "build_launcher('local').cancel(json.loads(sys.argv[1]))"
    subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code, json.dumps(handle)],
        check=True,
        timeout=120,
    )
    assert wait(launcher, handle, 60, 0.3)[0] == RunState.CANCELLED
    assert wait_for(lambda: not train_pids(s.output_dir), 30)


def test_a_sigkilled_supervisor_takes_its_ranks_with_it(tmp_path, datasets):
    import os

    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, steps=5000, run_id="orphan")
    handle = launcher.submit(s)
    wait_for(lambda: len(train_pids(s.output_dir)) == 2, 90)
    os.kill(int(handle["job_id"]), signal.SIGKILL)
    assert wait_for(lambda: not train_pids(s.output_dir), 30)
    assert wait_for(lambda: not any_pids(b"bench.launch.rank\x00--tag\x00orphan\x00"), 30)
    state, reason = launcher.poll(handle)
    assert state == RunState.FAILED and "died" in reason


def test_rank_pattern_matches_only_its_own_run():
    import subprocess
    import sys

    from bench.launch.supervisor import rank_pattern

    sleeper = "import time; time.sleep(60)"
    mine = subprocess.Popen([sys.executable, "-c", sleeper, "bench.launch.rank", "--tag", "S-ssd-1", "--out", "/x"])
    other = subprocess.Popen([sys.executable, "-c", sleeper, "bench.launch.rank", "--tag", "S-ssd-16", "--out", "/y"])
    dotted = subprocess.Popen([sys.executable, "-c", sleeper, "bench.launch.rank", "--tag", "SXssd-1", "--out", "/z"])

    def matched(pattern: str) -> set[int]:
        """What pkill -f signals for `pattern`: pgrep shares its matching (the space-joined command line)."""
        found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
        return {int(pid) for pid in found.stdout.split()}

    try:
        # pkill -f matches the space-joined command line, as on the remote host
        first = matched(rank_pattern("S-ssd-1"))
        assert mine.pid in first and not {other.pid, dotted.pid} & first, first  # S-ssd-16 is another run
        subprocess.run(["pkill", "-TERM", "-f", "--", rank_pattern("S-ssd-1")], check=True)
        assert mine.wait(10) == -signal.SIGTERM
        assert dotted.pid not in matched(rank_pattern("S.ssd-1"))  # '.' in a run id is a literal dot
        assert other.poll() is None and dotted.poll() is None
    finally:
        for p in (mine, other, dotted):
            p.kill()
            p.wait()


def test_oversubscription_is_refused_unless_asked_and_then_marked(tmp_path, datasets):
    import os

    from bench.errors import LaunchError

    cores = len(os.sched_getaffinity(0))
    launcher = build_launcher("local")
    too_many = spec(tmp_path, datasets, ranks=cores + 1, run_id="over")
    with pytest.raises(LaunchError, match=rf"host localhost: {cores + 1} ranks asked, but it has {cores} slot"):
        launcher.submit(too_many)
    allowed = changed(too_many, oversubscribe=True)
    handle = launcher.submit(allowed)
    state, reason = wait(launcher, handle, 240, 0.3)
    result = collect(handle, state, reason, cores + 1)
    assert result.ok, result.reason
    assert any(r["slot"]["oversubscribed"] for r in result.summary["per_rank"])


def test_a_supervisor_inside_execve_reads_alive_and_a_reused_pid_does_not(tmp_path):
    """Inside execve a process's command line reads empty for a moment: the poll must not call the
    supervisor dead then (it did once in twenty sweeps, and the run was cancelled before it started).
    A pid whose command line names another spec is a reused pid: not alive. A kernel thread (always
    running, command line empty) stands in for the supervisor inside execve, a plain `sleep` for the
    reused pid."""
    import subprocess
    from pathlib import Path

    from bench.launch.detached import _alive

    def kernel_thread(pid: str) -> bool:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes() == b"" and ") S" in Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False

    stand_in = next((p.name for p in Path("/proc").iterdir() if p.name.isdigit() and kernel_thread(p.name)), None)
    assert stand_in is not None, "no sleeping process with an empty command line (kernel thread) is visible"
    assert _alive({"job_id": stand_in, "output_dir": str(tmp_path)})
    other = subprocess.Popen(["sleep", "30"])
    try:
        wait_for(lambda: Path(f"/proc/{other.pid}/cmdline").read_bytes().startswith(b"sleep"), timeout=10)
        assert not _alive({"job_id": str(other.pid), "output_dir": str(tmp_path)})
    finally:
        other.kill()
        other.wait()


def test_the_supervisor_takes_its_spec_from_its_launcher_never_from_the_run_folder(tmp_path, datasets):
    """The spec names the interpreter the supervisor starts and the ssh config it passes: a spec.json that
    someone else rewrote in a shared run folder must not be what runs (issue 48's review). The supervisor
    reads the spec its launcher piped to it; the file, here another run's spec, is only a record."""
    import json
    import subprocess
    import sys

    piped, planted = spec(tmp_path / "a", datasets, ranks=1, steps=3), spec(tmp_path / "b", datasets, ranks=1)
    record = tmp_path / "a" / "run" / "spec.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"spec": planted.model_dump(mode="json"), "ssh": None}))
    doc = json.dumps({"spec": piped.model_dump(mode="json"), "ssh": None})
    argv = [sys.executable, "-m", "bench.launch.supervisor", "--spec", str(record), "--backend", "local"]
    done = subprocess.run(argv, input=doc, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (piped.output_dir / "metrics" / "summary.json").is_file()  # the piped spec ran
    assert not planted.output_dir.exists()  # the file's spec did not
