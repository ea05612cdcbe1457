"""One launcher interface: a RunSpec goes in; a RunResult with state and per-rank exits comes out.

A launch returns a small JSON-able handle, so an Airflow trigger in another process (or after a
restart) can poll, cancel and collect the same run.

What a run left in its output folder was written by the ranks (on a cluster, perhaps by somebody
else's job): it is read without following a link below the folder, only from regular files, and in
bounded amounts, so a planted `logs/rank1.log -> a worker's secret` or `-> /dev/zero` can neither show
the worker's files in a task log nor hang the worker. Every JSON file there goes through one reader
(bench.safe_fs.read_json) and is checked for what it must hold: a rank record its rank, host and exit
code, a summary the summary schema; each host name there is a host name (HOST_NAME_RE), or the record
is refused, naming the field, and the run is FAILED. A result's reason is bounded printable text
(bench.safe_fs.reason_text) wherever it is made, since it travels into results rows and alert e-mails.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import jsonschema

from bench.config.models import RunSpec
from bench.safe_fs import REASON_CHARS, MalformedFile, RefusedFile, read_json, read_tail, reason_text, regular_files


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


# A summary larger than this is not a run's output: it is refused, never read whole.
JSON_MAX_BYTES = 64 << 20
# A rank record (rank, host, exit code, slot) or a failed rank's record (its error) is far smaller.
RECORD_MAX_BYTES = 1 << 20
RANK_RECORD_KEYS = {"rank": int, "host": str, "exit_code": int}
SUMMARY = "metrics/summary.json"
# A host name as a record may carry one: 1-253 of these characters, never starting with '-' or '=' (an
# option, a spreadsheet formula); no line break, no space, nothing a results row or an e-mail would show.
HOST_NAME_RE = re.compile(r"^(?![-=])[A-Za-z0-9._-]{1,253}$")
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
            return RunState.FAILED, reason_text(f"state unknown for {now - self._since:.0f}s, giving up: {reason}")
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
    reason = reason_text(f"launch failed: {error}")
    return RunResult(spec.run_id, backend, RunState.FAILED, reason, output_dir=str(spec.output_dir))


def collect(handle: Handle, state: RunState, reason: str, ranks: int) -> RunResult:
    """Read what the ranks left in the output folder; a run without a valid summary is not COMPLETED,
    nor one with a rank record refused (bench.safe_fs.read_json, HOST_NAME_RE). The reason is bounded."""
    out = Path(handle["output_dir"])
    result = RunResult(
        handle["run_id"], handle["backend"], state, reason, str(handle.get("job_id", "")), output_dir=str(out)
    )
    refused = _read_ranks(out, result, ranks)
    result.log_paths = [str(out / "logs" / name) for name in _listed(out, "logs")]
    failures = [f"metrics/{n}" for n in _listed(out, "metrics") if fnmatch.fnmatchcase(n, "failed-rank*.json")]
    summary, summary_problem = read_summary(out, handle.get("nonce", ""))
    if state == RunState.COMPLETED:
        problems = _unclean_exits(result) + ([f"no valid summary ({summary_problem})"] if summary_problem else [])
        problems += refused
        if problems:
            result.state, result.reason = RunState.FAILED, "; ".join(problems)
    elif refused:
        result.reason = "; ".join([result.reason, *refused] if result.reason else refused)
    if result.state == RunState.COMPLETED:
        result.summary, result.summary_path = summary, str(out / SUMMARY)
    elif failures and (why := _failed_rank(out, failures[0])):  # why, in the rank's words, not only which rank
        result.reason = f"{result.reason}; {why}" if result.reason else why
    result.reason = reason_text(result.reason)
    return result


def _read_ranks(out: Path, result: RunResult, ranks: int) -> list[str]:
    """Each rank's exit code and host into `result` from its record; why each refused record was refused."""
    refused = []
    for rank in range(ranks):
        record, problem = rank_record(out, rank)
        result.exit_codes[rank] = record["exit_code"] if record else None
        if record:
            result.rank_hosts[rank] = record["host"]
        if problem:
            refused.append(problem)
    return refused


def rank_record(out: Path, rank: int) -> tuple[dict | None, str]:
    """(rank `rank`'s record, "") or (None, why it was refused); (None, "") where there is none."""
    rel = f"ranks/rank{rank}.json"
    try:
        record = read_json(out, rel, RECORD_MAX_BYTES, RANK_RECORD_KEYS)
        check_host(record["host"], f"{rel} field 'host'")
    except FileNotFoundError:
        return None, ""
    except (OSError, MalformedFile) as error:  # RefusedFile (a link, a FIFO, too large) is an OSError
        return None, f"rank {rank} record refused: {_within(out, error)}"
    return record, ""


def _within(out: Path, error: Exception) -> str:
    """An error about a file in the run folder, its paths relative to the folder, bounded: the run's
    reason has room for why, not for the folder's name again and again."""
    return reason_text(str(error).replace(f"{out}/", ""), REASON_CHARS // 2)


def _unclean_exits(result: RunResult) -> list[str]:
    """The problem of a run whose ranks did not all exit 0 (or left no record), naming each."""
    bad = {r: c for r, c in result.exit_codes.items() if c != 0}
    if not bad:
        return []
    named = ", ".join(f"rank {r} on {result.rank_hosts.get(r, '?')} exit {c}" for r, c in sorted(bad.items()))
    return [f"ranks without a clean exit: {named}"]


def _failed_rank(out: Path, rel: str) -> str:
    """A failed rank's own words (its record under metrics/), bounded; why it was not read otherwise."""
    try:
        first = read_json(out, rel, RECORD_MAX_BYTES)
    except FileNotFoundError:
        return ""
    except (OSError, MalformedFile) as error:
        return f"{rel} not read ({_within(out, error)})"
    return reason_text(f"rank {first.get('rank')}: {first.get('error')}", REASON_CHARS // 2)


def check_host(value: object, field: str) -> None:
    """MalformedFile naming `field` unless `value` is a host name (HOST_NAME_RE)."""
    if not isinstance(value, str) or not HOST_NAME_RE.fullmatch(value):
        raise MalformedFile(
            f"{field}: not a host name (1-253 of A-Z a-z 0-9 . _ -, not starting with - or =): "
            f"{reason_text(repr(value), 60)}"
        )


def summary_hosts(summary: dict) -> Iterator[tuple[str, object]]:
    """(field, value) of every host a schema-valid summary names: its hosts, each rank's and node's, the
    ring's ends, the rendezvous's and the checkpoint's and environment's per rank or node."""
    yield from ((f"hosts[{i}]", h) for i, h in enumerate(summary["hosts"]))
    groups = {"per_rank": ("host",), "nodes": ("host",), "ring": ("src_host", "dst_host"), "environment": ("host",)}
    checkpoint = summary.get("checkpoint")
    lists = {name: summary.get(name) for name in groups} | {
        "checkpoint.per_rank": checkpoint.get("per_rank") if isinstance(checkpoint, dict) else None
    }
    for name, items in lists.items():
        for i, item in enumerate(items if isinstance(items, list) else []):
            for key in groups.get(name, ("host",)):
                if isinstance(item, dict) and key in item:
                    yield f"{name}[{i}].{key}", item[key]
    if isinstance(summary.get("rendezvous"), dict):
        yield "rendezvous.host", summary["rendezvous"].get("host")


def read_summary(out: Path, nonce: str = "") -> tuple[dict | None, str]:
    """(the run's summary, "") when metrics/summary.json under `out` is a valid one (of this submit's
    `nonce`, where given, its hosts host names); else (None, why not). The one way a summary is read."""
    from bench.metrics.schema import validate_summary

    try:
        summary = read_json(out, SUMMARY, JSON_MAX_BYTES)
        validate_summary(summary)
        for field, value in summary_hosts(summary):
            check_host(value, f"summary.json field {field!r}")
    except FileNotFoundError:
        return None, "summary.json missing"
    except RefusedFile as error:  # a link, a FIFO, a device: no summary the run wrote is there
        return None, f"summary.json missing ({_within(out, error)})"
    except (OSError, MalformedFile) as error:
        return None, _within(out, error)
    except jsonschema.ValidationError as error:
        return None, reason_text(error.message, REASON_CHARS // 2)
    if nonce and summary.get("run_nonce") != nonce:
        got = reason_text(repr(summary.get("run_nonce")), 80)
        return None, f"summary.json belongs to another attempt (nonce {got}, this submit {nonce!r})"
    return summary, ""


def with_summary(result: dict) -> dict:
    """A completed result (RunResult.as_dict) with its summary read back from its run folder, as `collect`
    read it (XComs hold only the path): a summary that no longer passes, or a summary_path that is not
    the run folder's, makes it FAILED, saying why, instead of a result resting on whatever file is there."""
    if result.get("state") != "COMPLETED" or result.get("summary") is not None or not result.get("summary_path"):
        return result
    out = Path(result["output_dir"])
    if Path(result["summary_path"]) != out / SUMMARY:
        why = f"summary_path {reason_text(result['summary_path'], 120)} is not {SUMMARY} of the run folder"
        return {**result, "state": str(RunState.FAILED), "reason": why}
    summary, problem = read_summary(out)
    if summary is None:
        return {**result, "state": str(RunState.FAILED), "reason": f"no valid summary on reading it back ({problem})"}
    return {**result, "summary": summary}


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
