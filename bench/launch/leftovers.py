"""Find and cancel a suite's runs that are still alive after whoever waited on them stopped waiting.

Airflow calls a trigger's on_kill only for a trigger the triggerer is already running: a task
marked failed in the second before its trigger starts (or while the triggerer is down) leaves its
job running, and a killed CLI leaves its runs too. Every submit therefore leaves its handle beside
the run's outputs, and the suite sweeps them: before each scale (a live leftover would share the
machines it measures) and once after the last.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from bench.config.models import RunSpec
from bench.launch.base import Handle, Launcher
from bench.safe_fs import write_file

HANDLE_FILE = "handle.json"

log = logging.getLogger(__name__)


def record_handle(handle: Handle) -> Path:
    """Write the handle atomically into the run's output folder (local to whoever submitted)."""
    out = Path(handle["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    write_file(out / HANDLE_FILE, json.dumps(handle))
    return out / HANDLE_FILE


def recorded_handles(suite_dir: Path) -> list[Handle]:
    """Handles of every run submitted under suite_dir; an unreadable one is logged and skipped."""
    handles = []
    for path in sorted(suite_dir.glob(f"*/{HANDLE_FILE}")):
        try:
            handles.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as error:
            log.warning("skipping unreadable run handle %s: %s", path, error)
    return handles


def cancel_unfinished(launcher: Launcher, suite_dir: Path) -> list[str]:
    """Cancel this suite's runs whose launcher still reports them unfinished; returns their run ids.

    Safe to call again and again: a finished (or already cancelled) run is left alone, and the
    backends refuse to act on a job id or pid that now belongs to something else.
    """
    cancelled = []
    for handle in recorded_handles(suite_dir):
        if handle.get("backend") != launcher.name:
            continue
        state, _ = launcher.poll(handle)
        if not state.finished:
            log.warning("cancelling %s (%s job %s): still %s", handle["run_id"], launcher.name, handle["job_id"], state)
            launcher.cancel(handle)
            cancelled.append(handle["run_id"])
    return cancelled


def submit_recorded(launcher: Launcher, spec: RunSpec) -> Handle:
    """Submit one scale of a suite: leftovers of the suite (an earlier try of this scale included) go first."""
    import uuid

    cancel_unfinished(launcher, spec.output_dir.parent)
    # Each submit has its own nonce, carried into the rank summaries: collect() reads only this attempt's.
    spec = spec.model_copy(update={"nonce": uuid.uuid4().hex})
    handle = launcher.submit(spec)
    handle["nonce"] = spec.nonce
    record_handle(handle)
    return handle
