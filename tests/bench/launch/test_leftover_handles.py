"""Handles found in a suite's folder are evidence, not orders (issue 61 item 3): only a handle this suite's
own submit would have written for the folder it sits in is returned for the sweep to act on. Everything
else (a job id that is an option, a run or output folder of somebody else's, a link, a huge file) is
skipped before any launcher sees it. Real files in a real folder; no launcher is needed to show it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.launch.leftovers import HANDLE_FILE, HANDLE_MAX_BYTES, recorded_handles
from bench.suite.plan import run_prefix

SUITE_RUN_ID = "scheduled__2026-01-05T03:00:00+00:00"  # an Airflow run id: ':' and '+' leave the run ids
PREFIX = run_prefix(SUITE_RUN_ID)
NONCE = "0123456789abcdef0123456789abcdef"


def handle_for(folder: Path, **over) -> dict:
    """What submit_recorded writes for a local run in `folder` (bench.launch.detached's submit, plus nonce)."""
    return {
        "backend": "local",
        "run_id": PREFIX + folder.name,
        "output_dir": str(folder),
        "job_id": "4242",
        "ranks": 2,
        "submitted": 1767582000.0,
        "where": {"pid_ns": "pid:[4026531836]", "boot_id": "b0", "host": "worker-1"},
        "nonce": NONCE,
    } | over


def plant(suite: Path, name: str, handle: dict | str) -> Path:
    """`handle` (a dict as JSON, or raw text) at suite/name/handle.json."""
    folder = suite / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / HANDLE_FILE).write_text(handle if isinstance(handle, str) else json.dumps(handle))
    return folder


def test_the_suites_own_handles_are_read_as_written(tmp_path):
    """The control for every refusal below: a local and a Slurm handle as submit writes them both pass,
    with their own folder as output_dir, beside a regular file (a probe's) that is no run folder."""
    suite = tmp_path / "suite"
    local = handle_for(suite / "ssd-1")
    slurm = handle_for(suite / "ssd-2", backend="slurm", job_id="1234567", submitted=None, where=None)
    slurm = {k: v for k, v in slurm.items() if v is not None}
    plant(suite, "ssd-1", local)
    plant(suite, "ssd-2", slurm)
    (suite / "node-probe.json").write_text("{}")
    assert recorded_handles(suite, PREFIX) == [local, slurm]


# Each is written at suite/ssd-1/handle.json for the folder ssd-1: none may reach a launcher.
FORGED = {
    "user-option-as-job-id": {"backend": "slurm", "job_id": "--user=airflow", "where": None, "submitted": None},
    "user-option-as-pid": {"job_id": "--user=airflow"},
    "negative-pid": {"job_id": "-1"},  # kill(-1) signals every process the worker may signal
    "pid-zero": {"job_id": "0"},  # kill(0) signals the worker's own process group
    "pid-past-pid-max": {"job_id": str(1 << 23)},
    "job-id-as-number": {"job_id": 4242},
    "job-id-with-space": {"job_id": "4242 4243"},
    "unknown-backend": {"backend": "kubernetes"},
    "another-suites-run-id": {"run_id": "scheduled__2026-01-04T03-00-00-00-00-ssd-1"},
    "another-folders-run-id": {"run_id": PREFIX + "ssd-2"},
    "output-dir-elsewhere": {"output_dir": "/tmp/victim"},
    "output-dir-a-sibling": {"output_dir": "SIBLING"},
    "nonce-not-hex": {"nonce": "not-hex"},
    "nonce-missing": {"nonce": None},
    "ranks-zero": {"ranks": 0},
    "where-not-an-object": {"where": "here"},
}


@pytest.mark.parametrize("change", FORGED.values(), ids=FORGED.keys())
def test_a_handle_that_is_not_this_folders_own_is_skipped(tmp_path, change, caplog):
    suite = tmp_path / "suite"
    change = {k: (str(suite / "ssd-2") if v == "SIBLING" else v) for k, v in change.items()}
    handle = {k: v for k, v in (handle_for(suite / "ssd-1") | change).items() if v is not None}
    plant(suite, "ssd-1", handle)
    plant(suite, "ssd-2", handle_for(suite / "ssd-2"))
    assert [h["run_id"] for h in recorded_handles(suite, PREFIX)] == [PREFIX + "ssd-2"]
    assert "ssd-1/handle.json" in caplog.text  # logged, naming the file: someone may be planting handles


def test_a_handle_behind_a_link_is_never_read(tmp_path):
    """A valid handle reached through a link (at handle.json, or a run folder that is a link) is refused:
    the link's target may be anything the worker can read."""
    suite, elsewhere = tmp_path / "suite", tmp_path / "elsewhere"
    plant(elsewhere, "ssd-1", handle_for(suite / "ssd-1"))
    plant(elsewhere, "ssd-2", handle_for(suite / "ssd-2"))
    (suite / "ssd-1").mkdir(parents=True)
    (suite / "ssd-1" / HANDLE_FILE).symlink_to(elsewhere / "ssd-1" / HANDLE_FILE)
    (suite / "ssd-2").symlink_to(elsewhere / "ssd-2")
    assert recorded_handles(suite, PREFIX) == []


def test_a_handle_larger_than_the_bound_is_not_read(tmp_path):
    """A valid handle padded past HANDLE_MAX_BYTES is refused, unread: the file could be any size."""
    suite = tmp_path / "suite"
    plant(suite, "ssd-1", json.dumps(handle_for(suite / "ssd-1")) + " " * HANDLE_MAX_BYTES)
    assert recorded_handles(suite, PREFIX) == []


def test_output_dir_is_the_folder_found_and_what_the_launcher_gets(tmp_path):
    """A handle that names its folder by another spelling (through the user's own link above the suite,
    say a mount) passes; the launcher is handed the folder the handle was read from, never the handle's."""
    real = tmp_path / "real"
    (real / "suite").mkdir(parents=True)
    mount = tmp_path / "mount"
    mount.symlink_to(real)
    handle = handle_for(real / "suite" / "ssd-1", output_dir=str(mount / "suite" / "ssd-1" / "."))
    plant(real / "suite", "ssd-1", handle)
    assert [h["output_dir"] for h in recorded_handles(real / "suite", PREFIX)] == [str(real / "suite" / "ssd-1")]


def test_an_output_dir_that_cannot_be_resolved_is_skipped_not_raised(tmp_path):
    """A link loop as output_dir makes Path.resolve raise: the handle is skipped, the sweep goes on."""
    suite = tmp_path / "suite"
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    plant(suite, "ssd-1", handle_for(suite / "ssd-1", output_dir=str(loop / "x")))
    plant(suite, "ssd-2", handle_for(suite / "ssd-2"))
    assert [h["run_id"] for h in recorded_handles(suite, PREFIX)] == [PREFIX + "ssd-2"]
