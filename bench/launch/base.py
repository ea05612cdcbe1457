"""One launcher interface: a RunSpec goes in; a RunResult with state and per-rank exits comes out.

A launch returns a small JSON-able handle, so an Airflow trigger in another process (or after a
restart) can poll, cancel and collect the same run.

What a run left in its output folder was written by the ranks (on a cluster, perhaps by somebody
else's job): it is read without following a link below the folder, only from regular files, and in
bounded amounts, so a planted `logs/rank1.log -> a worker's secret` or `-> /dev/zero` can neither show
the worker's files in a task log nor hang the worker.
"""

from __future__ import annotations

import fnmatch
import json
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import jsonschema

from bench.config.models import RunSpec
from bench.safe_fs import RefusedFile, read_bounded, read_tail, regular_files


class RunState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    UNKNOWN = "UNKNOWN"  # the poll itself failed (controller, login node or shared folder unreachable)
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"

    @property
    def finished(self) -> bool:
        return self not in (RunState.PENDING, RunState.RUNNING, RunState.UNKNOWN)


# A rank record or summary larger than this is not a run's output: it is refused, never read whole.
JSON_MAX_BYTES = 64 << 20
# Lines of each rank log shown in the task log (read from at most its last safe_fs.TAIL_BYTES).
TAIL_LINES = 20

# How long a run may stay UNKNOWN (every poll failing) before the suite gives up on it. A poll error is
# "ask again", never a verdict: a controller restart or a login-node reboot must not fail a good run.
UNKNOWN_PATIENCE_S = 900.0


class PollPatience:
    """Turns a run of UNKNOWN polls longer than `patience_s` into FAILED; any answer resets it."""

    def __init__(self, patience_s: float = UNKNOWN_PATIENCE_S) -> None:
        self.patience_s, self._since = patience_s, None

    def judge(self, state: RunState, reason: str) -> tuple[RunState, str]:
        if state != RunState.UNKNOWN:
            self._since = None
            return state, reason
        now = time.monotonic()
        self._since = self._since or now
        if now - self._since > self.patience_s:
            return RunState.FAILED, f"state unknown for {now - self._since:.0f}s, giving up: {reason}"
        return state, reason


@dataclass
class RunResult:
    run_id: str
    backend: str
    state: RunState
    reason: str = ""
    job_id: str = ""
    exit_codes: dict[int, int | None] = field(default_factory=dict)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    log_paths: list[str] = field(default_factory=list)
    summary_path: str | None = None
    summary: dict | None = None
    output_dir: str = ""

    @property
    def ok(self) -> bool:
        return self.state == RunState.COMPLETED and self.summary is not None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["state"] = str(self.state)
        return d


Handle = dict  # {"backend", "run_id", "output_dir", "job_id", ...}: JSON-serialisable


class Launcher(Protocol):
    name: str
    # Seconds between a waiting sweep's polls: what one poll costs decides it (a state-file read, or a
    # scheduler query), since the wait adds half of it, on average, to every run of every scale.
    poll_s: float

    def check(self, spec: RunSpec) -> None:
        """Fail fast (LaunchError naming the host/partition) before anything launches."""

    def submit(self, spec: RunSpec) -> Handle: ...

    def poll(self, handle: Handle) -> tuple[RunState, str]: ...

    def cancel(self, handle: Handle) -> None: ...


def launch_failed(spec: RunSpec, backend: str, error: Exception) -> RunResult:
    """A run that never started is still a result: FAILED, with why, so the suite records and alerts it."""
    return RunResult(spec.run_id, backend, RunState.FAILED, f"launch failed: {error}", output_dir=str(spec.output_dir))


def collect(handle: Handle, state: RunState, reason: str, ranks: int) -> RunResult:
    """Read what the ranks left in the output folder; a run without a valid summary is not COMPLETED."""
    from bench.metrics.schema import validate_summary

    out = Path(handle["output_dir"])
    result = RunResult(
        handle["run_id"], handle["backend"], state, reason, str(handle.get("job_id", "")), output_dir=str(out)
    )
    for rank in range(ranks):
        record = _read_json(out, f"ranks/rank{rank}.json")
        result.exit_codes[rank] = record.get("exit_code") if record else None
        if record:
            result.rank_hosts[rank] = record.get("host", "")
    result.log_paths = [str(out / "logs" / name) for name in _listed(out, "logs")]
    failures = [f"metrics/{n}" for n in _listed(out, "metrics") if fnmatch.fnmatchcase(n, "failed-rank*.json")]
    summary_path = out / "metrics" / "summary.json"
    summary = _read_json(out, "metrics/summary.json")
    if state == RunState.COMPLETED:
        problems = []
        bad = {r: c for r, c in result.exit_codes.items() if c != 0}
        if bad:
            problems.append(
                "ranks without a clean exit: "
                + ", ".join(f"rank {r} on {result.rank_hosts.get(r, '?')} exit {c}" for r, c in sorted(bad.items()))
            )
        try:
            if summary is None:
                raise jsonschema.ValidationError("summary.json missing")
            validate_summary(summary)
            if handle.get("nonce") and summary.get("run_nonce") != handle["nonce"]:
                raise jsonschema.ValidationError(
                    f"summary.json belongs to another attempt (nonce {summary.get('run_nonce')!r}, "
                    f"this submit {handle['nonce']!r})"
                )
        except jsonschema.ValidationError as error:
            problems.append(f"no valid summary ({error.message})")
        if problems:
            result.state, result.reason = RunState.FAILED, "; ".join(problems)
    if result.state == RunState.COMPLETED:
        result.summary, result.summary_path = summary, str(summary_path)
    elif failures:  # say why, in the rank's own words, not only which rank exited
        first = _read_json(out, failures[0]) or {}
        why = f"rank {first.get('rank')}: {first.get('error')}"
        result.reason = f"{result.reason}; {why}" if result.reason else why
    return result


def fetch_and_collect(launcher: Launcher, handle: Handle, state: RunState, reason: str) -> RunResult:
    """Bring a remote run's outputs back (where the backend needs it), then collect; a failed fetch is FAILED."""
    from bench.errors import BenchError

    fetch = getattr(launcher, "fetch", None)
    if fetch is not None:
        try:
            fetch(handle, Path(handle["output_dir"]))
        except BenchError as error:
            state, reason = RunState.FAILED, f"{reason}; {error}" if reason else str(error)
    return collect(handle, state, reason, int(handle["ranks"]))


def _read_json(out: Path, rel: str) -> dict | None:
    """The JSON object in `rel` under `out`, or None: absent, malformed, or not a regular file (a link
    is not followed, a FIFO or device not opened for reading), or over JSON_MAX_BYTES."""
    try:
        doc = json.loads(read_bounded(out, rel, JSON_MAX_BYTES))
    except (FileNotFoundError, RefusedFile, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _listed(out: Path, rel: str) -> list[str]:
    """Regular files in the folder `rel` under `out`; nothing when the folder is absent or a link."""
    try:
        return regular_files(out, rel)
    except RefusedFile:
        return []


def log_tail(output_dir: str | Path, path: str | Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log in a run's output folder, for a task log; never all of the file.

    Reads at most the file's last safe_fs.TAIL_BYTES, through no link below `output_dir`, and only
    from a regular file: a log planted as a link to a worker's secret or to /dev/zero, or replaced by
    a FIFO, shows as "(not shown: ...)" naming it, and nothing blocks.
    """
    out = Path(output_dir)
    try:
        rel = Path(path).relative_to(out)
        text = read_tail(out, str(rel)).decode("utf-8", errors="replace")
    except ValueError:
        return f"(not shown: {path} is outside {out})"
    except OSError as error:
        return f"(not shown: {error})"
    return "\n".join(text.splitlines()[-lines:])


def wait(launcher: Launcher, handle: Handle, timeout_s: float, poll_s: float | None = None) -> tuple[RunState, str]:
    """Block until the run finishes, polling every `poll_s` (the launcher's own by default); on timeout cancel
    it and report TIMEOUT."""
    poll_s = launcher.poll_s if poll_s is None else poll_s
    deadline = time.monotonic() + timeout_s
    patience = PollPatience()
    while True:
        state, reason = patience.judge(*launcher.poll(handle))
        if state.finished:
            return state, reason
        if time.monotonic() > deadline:
            launcher.cancel(handle)
            return RunState.TIMEOUT, f"no result within {timeout_s:.0f}s; cancelled"
        time.sleep(poll_s)
