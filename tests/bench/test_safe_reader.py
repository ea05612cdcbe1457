"""Issue 61 (items 1, 2, 5, 9): what a run folder holds is read through one safe reader, failure reasons
are bounded printable text, host names are host names, and what the suite starts gets the allow-listed
environment only. Real files, links, FIFOs and processes; no cluster (tests/bench/launch/test_worker_secrets.py
starts the launchers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import LaunchError
from bench.launch.base import RECORD_MAX_BYTES, RunState, collect, with_summary
from bench.launch.detached import DetachedLauncher
from bench.launch.environment import kept, rank_environment, srun_export
from bench.launch.slurm import SlurmLauncher, batch_script, job_id_of
from bench.safe_fs import REASON_CHARS, MalformedFile, RefusedFile, read_json, reason_text
from tests.bench.launch.hostile_outputs import SECRET, handle_for, memory_bound, plant, run_folder, worker_secret
from tests.bench.launch.summaries import valid_summary

WORKER_SECRETS = {
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-S3CRET-value",
    "AIRFLOW_CONN_SCALEWATCH_RESULTS": "postgresql://u:S3CRET-pw@db/x",
    "SCALEWATCH_RESULTS_URL": "postgresql://u:S3CRET-url@db/x",
    "SLURM_JWT": "S3CRET-slurm-token",
    "MY_API_TOKEN": "S3CRET-token",
}


@pytest.fixture
def worker_env(monkeypatch) -> None:
    """This process's environment as an Airflow worker's: secrets beside the names ranks need."""
    for name, value in WORKER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("LC_X,AIRFLOW_CONN_Y", "not a name a shell or srun's --export list can carry")
    monkeypatch.setenv("PYTHONPATH", f"/opt/lib::relative/dir:{os.getcwd()}")


# --- the reader and the reason ---------------------------------------------------------------------------


def test_read_json_checks_kind_keys_and_types_naming_the_file_never_its_content(tmp_path):
    (tmp_path / "ok.json").write_text(json.dumps({"rank": 1, "host": "n1", "exit_code": 0}))
    assert read_json(tmp_path, "ok.json", 1000, {"rank": int, "host": str})["host"] == "n1"
    cases = {
        "list.json": ("[1, 2]", "holds a JSON list, not an object"),
        "text.json": (f"{SECRET} not json", "not JSON"),
        "nan.json": ('{"rank": NaN}', "not JSON"),
        "nokey.json": ('{"host": "n1"}', "no 'rank' field"),
        "bool.json": ('{"rank": true, "host": "n1"}', "field 'rank' is bool, not int"),
        "type.json": (json.dumps({"rank": 1, "host": [SECRET]}), "field 'host' is list, not str"),
    }
    for name, (text, why) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(MalformedFile, match=why) as refused:
            read_json(tmp_path, name, 1000, {"rank": int, "host": str})
        assert "S3CRET" not in str(refused.value) and str(tmp_path / name) in str(refused.value)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", ["secret", "/dev/zero", "fifo"])
def test_read_json_never_follows_a_link_or_blocks_on_a_fifo(tmp_path, planted):
    plant(tmp_path / "state.json", planted, worker_secret(tmp_path))
    with memory_bound(), pytest.raises(RefusedFile, match=r"symbolic link|not a regular file"):
        read_json(tmp_path, "state.json", 1 << 20)


def test_reason_text_keeps_a_bounded_line_of_printable_characters():
    raw = "first line\nsecond\x1b[31m red\x00 nul\u202e bidi\t" + "x" * 5000
    text = reason_text(raw)
    assert len(text) == REASON_CHARS and text.endswith("...")
    assert text.isprintable() and text.startswith("first line second [31m red nul bidi x")
    assert reason_text("  short\n\n") == "short" and len(reason_text(raw, 50)) == 50


# --- collect: records, hosts, reasons ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ['=HYPERLINK("http://x")', "-oProxyCommand=x", "n1\nInjected: yes", "a" * 254, "", "n 1"]
)
def test_a_rank_record_with_a_bad_host_is_refused_naming_the_field_and_fails_the_run(tmp_path, host):
    out = run_folder(tmp_path / "run")
    (out / "ranks" / "rank1.json").write_text(json.dumps({"rank": 1, "host": host, "exit_code": 0}))
    result = collect(handle_for(out), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert result.state == RunState.FAILED and result.summary is None
    assert (
        "rank 1 record refused" in result.reason and "ranks/rank1.json field 'host': not a host name" in result.reason
    )
    assert result.rank_hosts == {0: "n1"} and result.exit_codes[1] is None
    assert len(result.reason) <= REASON_CHARS and result.reason.isprintable()


@pytest.mark.parametrize(
    ("where", "field"),
    [
        (lambda s: s["per_rank"][0].update(host="=1+1"), "per_rank[0].host"),
        (lambda s: s.update(hosts=["n1", "-n2"]), "hosts[1]"),
        (lambda s: s.update(rendezvous={"host": "h\r\nX: y", "port": 1, "interface": None}), "rendezvous.host"),
    ],
)
def test_a_summary_naming_a_bad_host_is_no_valid_summary(tmp_path, where, field):
    out = run_folder(tmp_path / "run")
    summary = valid_summary()
    where(summary)
    (out / "metrics" / "summary.json").write_text(json.dumps(summary))
    result = collect(handle_for(out), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert result.state == RunState.FAILED and result.summary is None
    assert f"no valid summary (summary.json field '{field}': not a host name" in result.reason


def test_a_good_run_still_completes_with_its_hosts(tmp_path):
    out = run_folder(tmp_path / "run")
    result = collect(handle_for(out), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert result.ok and result.rank_hosts == {0: "n1", 1: "n1"} and result.summary["hosts"] == ["n1"]


def test_a_failed_ranks_huge_error_gives_a_bounded_one_line_reason(tmp_path):
    out = run_folder(tmp_path / "run")
    error = "Traceback\n" + "\n".join(f"  line {i} \x1b[2J" for i in range(20_000))
    (out / "metrics" / "failed-rank1.json").write_text(json.dumps({"rank": 1, "error": error}))
    result = collect(handle_for(out), RunState.FAILED, "slurm FAILED exit 1:0 reason NonZeroExitCode", 2)
    assert result.reason.startswith("slurm FAILED exit 1:0 reason NonZeroExitCode; rank 1: Traceback line 0")
    assert len(result.reason) <= REASON_CHARS and result.reason.isprintable()


def test_a_rank_record_over_its_bound_is_refused_unread(tmp_path):
    out = run_folder(tmp_path / "run")
    record = {"rank": 1, "host": "n1", "exit_code": 0, "pad": "x" * RECORD_MAX_BYTES}
    (out / "ranks" / "rank1.json").write_text(json.dumps(record))
    result = collect(handle_for(out), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert result.state == RunState.FAILED and f"larger than {RECORD_MAX_BYTES} bytes" in result.reason


# --- summary read back, state file, probe -----------------------------------------------------------------


def completed(out: Path) -> dict:
    result = collect(handle_for(out), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert result.ok, result.reason
    return result.as_dict() | {"summary": None}  # as an XCom holds it


def test_a_summary_swapped_for_a_link_after_collect_is_not_read_back(tmp_path):
    from scalewatch.tasks.scales import with_summary as plugin_with_summary

    out = run_folder(tmp_path / "run")
    result = completed(out)
    assert with_summary(result)["summary"]["hosts"] == ["n1"]
    worker_file = tmp_path / "worker" / "summary.json"
    worker_file.parent.mkdir()
    worker_file.write_text(json.dumps(valid_summary(workload="from-the-worker")))
    plant(out / "metrics" / "summary.json", "secret", worker_file)
    for read_back in (with_summary, plugin_with_summary):
        back = read_back(result)
        assert back["state"] == "FAILED" and back.get("summary") is None
        assert "no valid summary on reading it back" in back["reason"] and "symbolic link" in back["reason"]


def test_a_summary_path_outside_the_run_folder_is_refused(tmp_path):
    out = run_folder(tmp_path / "run")
    result = completed(out) | {"summary_path": str(tmp_path / "elsewhere" / "summary.json")}
    back = with_summary(result)
    assert back["state"] == "FAILED" and "is not metrics/summary.json of the run folder" in back["reason"]


def remote_handle(out: Path) -> dict:
    """A handle from another pid namespace: the poll decides on the state file alone."""
    where = {"pid_ns": "pid:[1]", "boot_id": "elsewhere", "host": "other"}
    return handle_for(out, backend="local") | {"job_id": "1", "submitted": 0.0, "where": where}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", ["secret", "/dev/zero", "fifo"])
def test_a_state_file_planted_as_a_link_or_fifo_is_an_unknown_poll_naming_it(tmp_path, planted):
    out = run_folder(tmp_path / "run")
    secret = worker_secret(tmp_path)
    secret.write_text(json.dumps({"state": "FAILED", "reason": SECRET, "updated": 0}))
    plant(out / "state.json", planted, secret)
    with memory_bound():
        state, reason = DetachedLauncher().poll(remote_handle(out))
    assert state == RunState.UNKNOWN and "S3CRET" not in reason
    assert "state file unreadable" in reason and ("symbolic link" in reason or "not a regular file" in reason)


def test_a_state_file_with_an_unknown_state_or_a_huge_reason(tmp_path):
    out = run_folder(tmp_path / "run")
    (out / "state.json").write_text(json.dumps({"state": "PWNED", "reason": "", "updated": 0}))
    state, reason = DetachedLauncher().poll(remote_handle(out))
    assert state == RunState.UNKNOWN and "state 'PWNED' is not a run state" in reason
    (out / "state.json").write_text(json.dumps({"state": "FAILED", "reason": "x\n" * 10_000, "updated": 0}))
    state, reason = DetachedLauncher().poll(remote_handle(out))
    assert state == RunState.FAILED and len(reason) <= REASON_CHARS and "\n" not in reason


def probe_doc() -> dict:
    return {"ceiling_mb_s": 100.0, "per_node_mb_s": 100.0, "bound": "client", "conclusive": True, "reason": "",
            "levels": [], "slow_nodes": []}  # fmt: skip


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", ["secret", "/dev/zero", "fifo"])
def test_probe_json_planted_as_a_link_or_fifo_is_no_probe(tmp_path, planted):
    from bench.cli.project import with_probe_curve
    from bench.suite.plan import read_probe

    out = tmp_path / "run"
    out.mkdir()
    (out / "probe.json").write_text(json.dumps(probe_doc()))
    assert read_probe(out)["ceiling_mb_s"] == 100.0
    secret = worker_secret(tmp_path)
    secret.write_text(json.dumps(probe_doc() | {"reason": SECRET}))
    plant(out / "probe.json", planted, secret)
    with memory_bound():
        assert read_probe(out) is None
        assert with_probe_curve(["unchanged"], out) == ["unchanged"]


def test_a_probe_without_its_keys_or_naming_a_bad_slow_node_is_no_probe(tmp_path):
    from bench.suite.plan import read_probe

    (tmp_path / "probe.json").write_text(json.dumps({"per_node_mb_s": 1.0}))
    assert read_probe(tmp_path) is None
    (tmp_path / "probe.json").write_text(json.dumps(probe_doc() | {"slow_nodes": [{"host": "=cmd|'/c calc'!A1"}]}))
    assert read_probe(tmp_path) is None
    (tmp_path / "probe.json").write_text(json.dumps(probe_doc() | {"slow_nodes": [{"host": "node2"}]}))
    assert read_probe(tmp_path)["slow_nodes"] == [{"host": "node2"}]


# --- the environment things are started with ---------------------------------------------------------------


def test_the_allow_list_keeps_what_ranks_read_and_no_secret(worker_env):
    env = kept()
    assert not [k for k in env if k.startswith("AIRFLOW")] and "S3CRET" not in json.dumps(env)
    assert env["NCCL_DEBUG"] == "INFO" and env["LC_ALL"] == "C.UTF-8" and env["PATH"] == os.environ["PATH"]
    assert not [k for k in env if not k.isidentifier()]
    assert env["PYTHONPATH"] == f"/opt/lib:{os.getcwd()}"  # the empty and relative entries name the cwd
    ranks = rank_environment({"HOROVOD_RANK": "1"}, {"SCALEWATCH_RENDEZVOUS_SECRET": "run-secret"})
    assert ranks["HOROVOD_RANK"] == "1" and ranks["SCALEWATCH_RENDEZVOUS_SECRET"] == "run-secret"
    assert srun_export(["PATH", "LANG", "PATH"]) == "--export=LANG,PATH"


def test_a_started_process_sees_only_the_allow_list(worker_env):
    """The environment a child actually gets, read back from the child itself."""
    shown = subprocess.run(
        [sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"],
        env=rank_environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "S3CRET" not in shown and "AIRFLOW" not in shown and json.loads(shown)["NCCL_DEBUG"] == "INFO"


def test_the_batch_script_exports_only_the_allow_list_and_runs_from_root(worker_env, tmp_path, datasets):
    from tests.bench.launch.test_slurm import spec

    s = spec(tmp_path, datasets, env={"NCCL_DEBUG": "WARN"})
    script = batch_script(s, sys.executable)
    assert "S3CRET" not in script and "AIRFLOW" not in script and "SLURM_JWT" not in script
    lines = script.splitlines()
    assert "#SBATCH --export=NONE" in lines and "#SBATCH --chdir=/" in lines and "cd / || exit 71" in lines
    assert "export NCCL_DEBUG=WARN" in lines  # the run's own setting over the worker's
    srun = next(line for line in lines if line.startswith("srun "))
    exported = srun.split()[1].removeprefix("--export=").split(",")
    assert "PATH" in exported and "NCCL_DEBUG" in exported and not [n for n in exported if "AIRFLOW" in n]
    assert " --chdir=/ " in srun and f"{sys.executable} -P -m bench.launch.rank" in srun
    assert f"{sys.executable} -P -m bench.launch.rendezvous" in script
    remote = batch_script(s, "python3", remote=True)
    assert os.environ["PATH"] not in remote and "export PATH=/usr/local/sbin:" in remote
    syntax = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert syntax.returncode == 0, syntax.stderr


@pytest.mark.parametrize("directive", ["--export=ALL", "--chdir=/tmp", "--get-user-env"])
def test_a_directive_undoing_the_jobs_environment_or_folder_is_refused(tmp_path, datasets, directive):
    from tests.bench.launch.test_slurm import spec

    with pytest.raises(LaunchError, match=rf"sbatch directive '{directive}': the suite sets"):
        batch_script(spec(tmp_path, datasets, sbatch_directives=(directive,)), sys.executable)


@pytest.mark.parametrize("job", ["--user=root", "-u", "12 13", "", "1e3", "١٢"])
def test_a_job_id_that_is_not_digits_never_reaches_scancel_or_scontrol(job):
    launcher = SlurmLauncher()
    handle = {"backend": "slurm", "run_id": "r", "output_dir": "/nonexistent", "job_id": job, "ranks": 1}
    with pytest.raises(LaunchError, match="not a Slurm job id"):
        launcher.cancel(handle)
    state, reason = launcher.poll(handle)
    assert state == RunState.FAILED and "not a Slurm job id" in reason
    assert job_id_of(handle | {"job_id": "123"}) == "123"
