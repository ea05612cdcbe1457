"""Find and cancel a suite's runs that are still alive after whoever waited on them stopped waiting.

Airflow calls a trigger's on_kill only for a trigger the triggerer is already running: a task
marked failed in the second before its trigger starts (or while the triggerer is down) leaves its
job running, and a killed CLI leaves its runs too. Every submit therefore leaves its handle beside
the run's outputs, and the suite sweeps them: before each scale (a live leftover would share the
machines it measures) and once after the last.

The run folder is where every part of the suite meets (the worker that submitted, another worker or
container that sweeps after it died, the CLI), which is why the handle lives there and not in one
worker's own folder. It is also a folder others can write (a cluster's shared store, a node's root), so
a handle found there is evidence, never an order: it is read with no link followed, from a regular file
only, in a bounded amount (a FIFO there cannot hang the sweep), and acted on only when it is exactly what
this suite's own submit would have written for that folder (RecordedHandle): a registered launcher, a
job id that is a Slurm job number or a pid (`--user=airflow` is neither), the run id the plan gives that
folder and that folder as its output folder. Anything else is logged and skipped. The launchers then
check the job itself (a Slurm job's name, a supervisor's command line) before they cancel.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, ValidationInfo, model_validator

from bench.config.models import RunSpec
from bench.config.types import LauncherKind
from bench.launch.base import Handle, Launcher
from bench.safe_fs import read_bounded, write_file

HANDLE_FILE = "handle.json"
# A handle is a few hundred bytes: anything larger in its place is not one, and is never read whole.
HANDLE_MAX_BYTES = 64 << 10
# Linux's largest pid (PID_MAX_LIMIT): a local or ssh handle's job id is a pid.
PID_MAX = 1 << 22
PID_BACKENDS = ("local", "ssh")  # bench.launch.detached's submit: job_id is the supervisor's pid

log = logging.getLogger(__name__)

Number = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,9}$")]  # sbatch --parsable's, or a pid
Word = Annotated[str, StringConstraints(max_length=256)]


class Where(BaseModel):
    """Where a detached run's submitter stood (bench.launch.detached._here): its pid means something there."""

    model_config = ConfigDict(strict=True, frozen=True)
    pid_ns: Word
    boot_id: Word
    host: Word


class RecordedHandle(BaseModel):
    """A handle.json as this suite's submit writes it, for the folder it was found in; nothing else passes.

    Validated with context {"folder": the run folder it was read from, "run_id": the run id the plan
    gives that folder}: a handle naming another run or another folder (a victim's, where `cancel.request`
    would be written) is refused, so a planted one can at most name this very run.
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")
    backend: LauncherKind
    run_id: Annotated[str, StringConstraints(max_length=512)]
    output_dir: Annotated[str, StringConstraints(max_length=4096)]
    job_id: Number
    nonce: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{1,64}$")]
    ranks: Annotated[int, Field(ge=1)]
    submitted: float | None = None
    where: Where | None = None

    @model_validator(mode="after")
    def _this_folders_run(self, info: ValidationInfo) -> Self:
        """The job id fits its backend; the run id and output folder are the ones the folder implies."""
        if self.backend in PID_BACKENDS and int(self.job_id) > PID_MAX:
            raise ValueError(f"job_id {self.job_id} is not a pid")
        if not info.context:
            raise ValueError("a handle is checked only against the folder it was found in")
        folder, run_id = Path(info.context["folder"]), info.context["run_id"]
        if self.run_id != run_id:
            raise ValueError(f"run_id {self.run_id!r} is not this folder's run ({run_id!r})")
        if not _same_folder(Path(self.output_dir), folder):
            raise ValueError(f"output_dir {self.output_dir!r} is not the folder it was found in ({folder})")
        return self

    def handle(self, folder: Path) -> Handle:
        """What a launcher gets: the validated fields only, with the folder the handle was read from."""
        return self.model_dump(exclude_none=True) | {"output_dir": str(folder)}


def _same_folder(named: Path, folder: Path) -> bool:
    """`named` is `folder` once links are resolved; a path that cannot be resolved (a link loop) is not."""
    try:
        return named.resolve() == folder.resolve()
    except (OSError, RuntimeError):
        return False


def record_handle(handle: Handle) -> Path:
    """Write the handle atomically into the run's output folder, where every part of the suite finds it
    (never through a link planted at its name); what is read back is checked again (RecordedHandle)."""
    out = Path(handle["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    write_file(out / HANDLE_FILE, json.dumps(handle))
    return out / HANDLE_FILE


def run_folders(suite_dir: Path) -> list[str]:
    """Names in suite_dir that may be run folders (anything but a regular file or a hidden name), sorted;
    a link or FIFO among them is listed, so that reading its handle refuses it by name."""
    try:
        with os.scandir(suite_dir) as entries:
            return sorted(
                e.name for e in entries if not e.name.startswith(".") and not e.is_file(follow_symlinks=False)
            )
    except FileNotFoundError:
        return []


def read_handle(suite_dir: Path, name: str, run_prefix: str) -> Handle | None:
    """The handle of run folder `name`, validated (RecordedHandle); None when it has none, or when what
    is there is refused or invalid (logged: someone may be planting handles)."""
    try:
        data = read_bounded(suite_dir, f"{name}/{HANDLE_FILE}", HANDLE_MAX_BYTES)
    except FileNotFoundError:
        return None  # a folder without a handle: not submitted (yet), or not a run's
    except OSError as error:  # RefusedFile: a link, a FIFO or device, too large; or unreadable
        log.warning("skipping run handle %s: %s", suite_dir / name / HANDLE_FILE, error)
        return None
    folder = suite_dir / name
    try:
        checked = RecordedHandle.model_validate_json(data, context={"folder": folder, "run_id": run_prefix + name})
    except ValidationError as error:
        why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'handle'}: {e['msg']}" for e in error.errors())
        log.warning("skipping run handle %s: not one this suite wrote for this folder (%s)", folder / HANDLE_FILE, why)
        return None
    return checked.handle(folder)


def recorded_handles(suite_dir: Path, run_prefix: str = "") -> list[Handle]:
    """Handles of every run submitted under suite_dir, each validated for the folder it was found in (the
    run id `run_prefix` + the folder's name, bench.suite.plan.run_prefix); any other is logged and skipped."""
    handles = []
    for name in run_folders(suite_dir):
        handle = read_handle(suite_dir, name, run_prefix)
        if handle is not None:
            handles.append(handle)
    return handles


def cancel_unfinished(launcher: Launcher, suite_dir: Path, run_prefix: str = "") -> list[str]:
    """Cancel this suite's runs whose launcher still reports them unfinished; returns their run ids.

    `run_prefix`: what the suite's run ids put before a run folder's name (bench.suite.plan.run_prefix);
    a handle naming any other run id is not acted on. Safe to call again and again: a finished (or
    already cancelled) run is left alone, and the backends refuse to act on a job id or pid that now
    belongs to something else.
    """
    cancelled = []
    for handle in recorded_handles(suite_dir, run_prefix):
        if handle["backend"] != launcher.name:
            continue
        state, _ = launcher.poll(handle)
        if not state.finished:
            log.warning("cancelling %s (%s job %s): still %s", handle["run_id"], launcher.name, handle["job_id"], state)
            launcher.cancel(handle)
            cancelled.append(handle["run_id"])
    return cancelled


def submit_recorded(launcher: Launcher, spec: RunSpec) -> Handle:
    """Submit one scale of a suite: leftovers of the suite (an earlier try of this scale included) go first.

    The suite's run ids are its prefix and their folder's name (bench.suite.plan.run_spec), so this
    spec's run id, less its folder's name, is the prefix every other run of the suite has too.
    """
    import uuid

    cancel_unfinished(launcher, spec.output_dir.parent, spec.run_id.removesuffix(spec.output_dir.name))
    # Each submit has its own nonce, carried into the rank summaries: collect() reads only this attempt's.
    spec = spec.model_copy(update={"nonce": uuid.uuid4().hex})
    handle = launcher.submit(spec)
    handle["nonce"] = spec.nonce
    record_handle(handle)
    return handle
