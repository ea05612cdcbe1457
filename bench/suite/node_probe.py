"""The storage read from the compute nodes at once: fio on 1, 2, 4, ... nodes through the suite's launcher.

Why from the nodes and together: one client's fio measures that client's link (or the Airflow
worker's, which may not even mount the store), while a cluster's nodes read the store at once. One
node first climbs to its ceiling (bench.storage.fio_probe.probe: `ceiling_mb_s`, kept as before, and
`per_node_mb_s`); then 2, 4, ... nodes (and the suite's node count) each read their own disjoint,
cold share (bench.storage.fio_probe.probe_share) at that node's best parallelism, over one window.

Start barrier: a start-at timestamp handed to every node, which sleeps until it and then starts fio.
fio's own --client/--server mode was not used: it needs a fio server listening on a port of every node
(one more port through the cluster's firewall, open to anyone who reaches it, and started by someone
before the suite runs), while a timestamp travels in the argv of the ssh or srun that starts each
node's probe, needs only the nodes' clocks in step (NTP keeps them within milliseconds of a level that
lasts seconds), and works alike over ssh, srun and a local process. The lead time is twice the first
node's measured start-up (ssh, Python) plus a second; a node that starts more than LATE_SHARE of a
level late leaves its level out of the curve, naming the node, since its read did not overlap the others'.

Clocks: a node's `started_at` and `late_s` are read on its own clock, so the worker does not take
them on trust. It notes (on its clock) when it launched each level and when it got each node's result;
a node whose reported process start, read window and report time do not fit inside that span (give or
take LATE_SHARE of a level) has a clock out of step with the worker's, and its level is not counted
(`judge_level`). The lead time is measured on the worker alone: the climb's round trip less the time
the node reports it spent (two differences, each on one clock).

A level's aggregate is every node's bytes over the window from the first node's start to the last
one's end: what the store served them together. `bound`: 'node' where one node of the largest counted
level stands out against its peers' median (bench.analysis.verdict.nodes.NODE_RULE; named with its
figures in `slow_nodes`): the level read at that node's pace, so the aggregate is no store limit; else
bench.storage.fio_probe.BOUND_RULE ('client' or 'store'). A level that
re-read files (`fresh` false on any node), read for less than MIN_LEVEL_S, started late or came from a
node whose clock is out of step is left out of `aggregate` (kept in `node_levels` with its reason and
listed in `left_out`), so neither `bound` nor sizing rests on it.

What a node runs starts as a rank does (bench.launch.environment): `python -P` from `/`, with the
allow-listed environment (a local process, srun's `--export`), never the worker's secrets; over ssh the
host's own environment and the suite's `env` setting (bench.launch.ssh_rendezvous.remote_command).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from bench.analysis.verdict.nodes import NODE_RULE, probe_bound, probe_slow_nodes
from bench.config.models import SweepConfig
from bench.config.types import NAME_RE
from bench.errors import DatasetError
from bench.launch.environment import SAFE_CWD, kept, python_module, rank_environment, srun_export, tool_environment
from bench.launch.python import node_python
from bench.storage.fio_probe import BOUND_RULE, MIN_LEVEL_S, ProbeError, aggregate_bound, nodes_for, too_short
from bench.suite.plan import suite_dataset_dir, workload_names

LATE_SHARE = 0.1  # a node starting later than this share of a level did not read beside the others
MIN_LEAD_S = 1.0


def node_counts(total: int) -> list[int]:
    """1, 2, 4, ... up to `total`, and `total` itself."""
    out, n = [], 1
    while n < total:
        out.append(n)
        n *= 2
    return [*out, total]


@dataclass
class NodeOutput:
    node: str
    returncode: int
    stdout: str
    stderr: str
    received_at: float = 0.0  # the worker's clock when it had this node's result


# A node's result is input from another machine (issue 48): every number finite and in range, every text
# of bounded length, a host a host name. NaN or Infinity in a node's JSON is refused where it is parsed
# (node_json): a NaN once passed as a float and crashed write_probe, which writes strict JSON.
MAX_REASON_CHARS = 2000
MAX_EXTRA_KEYS = 64
# HOST_RE without its length lookahead (pydantic's regex engine has no look-around): the length is max_length
NodeHost = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$", max_length=253)]
Finite = Annotated[float, Field(ge=0, le=1e15)]
Count = Annotated[int, Field(ge=0, le=2**62)]
EpochSeconds = Annotated[float, Field(ge=0, le=1e11)]  # a node's clock (seconds since 1970)


class NodeModel(BaseModel):
    """A node's result: the keys the suite reads are checked strictly, the rest kept (as JSON had them,
    finite: node_json refuses NaN and Infinity anywhere in the document)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class _Level(NodeModel):
    jobs: int = Field(ge=1, le=4096)
    mb_s: Finite
    bytes: Count
    seconds: Finite
    fresh: bool


class ClimbDoc(NodeModel):
    """One node's climb (bench.storage.fio_probe.probe's document): the keys the suite reads, the rest kept."""

    ceiling_mb_s: Finite
    levels: list[_Level] = Field(max_length=64)
    repeat: _Level
    conclusive: bool
    reason: str = Field(max_length=MAX_REASON_CHARS)
    extra: dict = Field(max_length=MAX_EXTRA_KEYS)


class ShareDoc(_Level):
    """One node's part of a multi-node level (bench.storage.fio_probe.probe_share); times on the node's clock."""

    host: NodeHost
    share: int = Field(ge=0, le=4096)
    of: int = Field(ge=1, le=4096)
    started_at: EpochSeconds
    late_s: float = Field(ge=-1e6, le=1e6)
    method: Annotated[str, StringConstraints(pattern=NAME_RE.pattern)]
    next_offset: Count
    process_started_at: EpochSeconds
    reported_at: EpochSeconds


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a number a result may hold")


def node_json(text: str):
    """A node's JSON line; NaN, Infinity and -Infinity (which json.loads takes by default) refused."""
    return json.loads(text, parse_constant=_refuse_constant)


def node_doc(out: NodeOutput, what: str = "storage probe", model: type[BaseModel] | None = None) -> dict:
    """A node's JSON (checked against `model` where given), or the error naming the node: exit 2 is the
    dataset (unreadable, not staged there), unless it is argparse's usage error (an older scalewatch on
    the node that does not know an argument): that is the node's install, not the data."""
    if out.returncode != 0:
        lines = [x for x in out.stderr.strip().splitlines() if x.strip()]
        why = lines[-1] if lines else f"exit {out.returncode}"
        usage = any(x.startswith("usage:") for x in lines)
        if out.returncode == 2 and usage:
            older = "is the scalewatch installed there older than the worker's?"
            raise ProbeError(f"{what} on node {out.node}: the node refused its arguments ({why}); {older}")
        kind = DatasetError if out.returncode == 2 else ProbeError
        raise kind(f"{what} on node {out.node}: {why}")
    try:
        doc = node_json(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise ProbeError(f"{what} on node {out.node}: no JSON result ({out.stderr.strip()[-300:]})") from None
    except ValueError as error:
        raise ProbeError(f"{what} on node {out.node}: {error}") from None
    if model is None:
        return doc
    try:
        return model.model_validate(doc).model_dump()
    except ValidationError as error:
        first = error.errors()[0]
        field_name = ".".join(str(x) for x in first["loc"]) or "document"
        raise ProbeError(f"{what} on node {out.node}: result field {field_name!r}: {first['msg']}") from None


@dataclass
class LocalNodes:
    """One node: this machine (the local launcher trains here)."""

    names: list[str] = field(default_factory=lambda: ["localhost"])
    python: str = field(default_factory=node_python)  # the interpreter the launcher's ranks run

    def run(self, count: int, argv_for, timeout: float) -> list[NodeOutput]:
        proc = subprocess.Popen(argv_for("0/1"), env=rank_environment(), cwd=SAFE_CWD, **_PIPES)
        return _communicate({"localhost": proc}, timeout)


@dataclass
class SshNodes:
    """The suite's ssh hosts, each reached as its ranks are (bench.launch.ssh_rendezvous.remote_command)."""

    ssh: object
    hosts: list
    env: dict[str, str]

    @property
    def names(self) -> list[str]:
        return [h.host for h in self.hosts]

    @property
    def python(self) -> str:
        return node_python()  # as the ssh launcher's ranks run (bench.launch.supervisor)

    def run(self, count: int, argv_for, timeout: float) -> list[NodeOutput]:
        from bench.launch.ssh_rendezvous import remote_command

        procs = {}
        for i, host in enumerate(self.hosts[:count]):
            argv = self.ssh.argv(host, remote_command(self.env, argv_for(f"{i}/{count}")))  # type: ignore[attr-defined]
            procs[host.host] = subprocess.Popen(argv, env=tool_environment(), cwd=SAFE_CWD, **_PIPES)
        return _communicate(procs, timeout)


@dataclass
class SlurmNodes:
    """`count` nodes of the suite's partition through one srun, a task on each; a task's share comes from
    SLURM_PROCID and SLURM_NTASKS, its name from its own hostname."""

    runner: object
    cfg: SweepConfig
    total: int

    @property
    def names(self) -> list[str]:
        return [f"node {i}" for i in range(self.total)]

    @property
    def python(self) -> str:
        return node_python(None, self.runner.remote)  # type: ignore[attr-defined]  # as bench.launch.slurm

    def run(self, count: int, argv_for, timeout: float) -> list[NodeOutput]:
        srun = ["srun", srun_export({"PATH", *kept()}), f"--chdir={SAFE_CWD}", "--label", "--kill-on-bad-exit=0"]
        srun += ["-N", str(count), "--ntasks-per-node=1", "-n", str(count)]
        srun += [f"--partition={self.cfg.where.partition}"] if self.cfg.where.partition else []
        srun += [f"--account={self.cfg.where.account}"] if self.cfg.where.account else []
        done = self.runner.run([*srun, *argv_for("slurm")], check=False, timeout=timeout)  # type: ignore[attr-defined]
        received = time.time()
        outs = {i: NodeOutput(f"slurm task {i}", 0, "", "", received) for i in range(count)}
        general = []  # srun's own words (no task label): every task's failure shows them
        for stream in ("stdout", "stderr"):
            for line in getattr(done, stream).splitlines():
                label, _, text = line.partition(": ")
                if label.strip().isdigit() and int(label) in outs:
                    out = outs[int(label)]
                    setattr(out, stream, getattr(out, stream) + text + "\n")
                elif line.strip():
                    general.append(line)
        for out in outs.values():
            if not out.stdout.strip():
                out.returncode = done.returncode or 1
                out.stderr += "\n".join(general)
        return list(outs.values())


_PIPES = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}


def _communicate(procs: dict[str, subprocess.Popen], timeout: float) -> list[NodeOutput]:
    outs, deadline = [], time.monotonic() + timeout
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += f"\nno result within {timeout:.0f} s"
        code = proc.returncode if proc.returncode is not None else 1
        outs.append(NodeOutput(name, code, stdout, stderr, time.time()))
    return outs


def suite_nodes(cfg: SweepConfig, launcher, env: dict[str, str] | None = None):
    """The nodes the suite trains on, as its launcher reaches them."""
    if cfg.where.launcher == "ssh":
        hosts = list({h.host: h for h in cfg.where.hosts}.values())
        return SshNodes(launcher.ssh, hosts, dict(env or {}))
    if cfg.where.launcher == "slurm":
        total = nodes_for(
            "slurm", [], cfg.where.ranks_per_node or cfg.where.gpus_per_node or None, max(cfg.training.gpus)
        )
        return SlurmNodes(launcher.runner, cfg, total)
    return LocalNodes()


def probe_nodes(cfg: SweepConfig, nodes, python: str | None = None) -> dict:
    """probe.json's document: one node's climb (its keys as before) with `per_node_mb_s`, `aggregate`
    ({nodes, mb_s, min_node_mb_s} per node count counted), `bound` (client, store or node) and
    `slow_nodes` ([{host, mb_s, peers_median_mb_s}], empty when none stands out). Raises DatasetError or ProbeError
    naming the node that could not read or sent a malformed result."""
    python = python or getattr(nodes, "python", None) or node_python()
    base = python_module(python, "bench.storage.probe_cli", "--max-jobs", str(cfg.probe.probe_max_jobs))
    base += ["--seconds", str(cfg.probe.probe_seconds)]
    for d in dict.fromkeys(suite_dataset_dir(cfg, w) for w in workload_names(cfg.training.workloads)):
        base += ["--path", str(d)]
    limit = max(120.0, cfg.probe.probe_seconds * 40)
    launched = time.time()
    out = nodes.run(1, lambda share: base, limit)[0]
    climb = node_doc(out, model=ClimbDoc)
    per_node = float(climb["ceiling_mb_s"])
    top_jobs = max([*climb["levels"], climb["repeat"]], key=lambda lv: lv["mb_s"])["jobs"]
    aggregate = [{"nodes": 1, "mb_s": per_node, "min_node_mb_s": per_node}]
    levels, reasons, left_out = [], [] if climb["conclusive"] else [climb["reason"]], []
    labels: dict[str, str] = {}  # a node's own name (its hostname) -> the suite's name for it
    offset = int(climb["extra"].get("next_offset", 0))
    lead = MIN_LEAD_S + 2 * startup_s(climb, launched, out.received_at)
    for count in node_counts(len(nodes.names))[1:]:
        level_launched = time.time()
        start_at = level_launched + lead

        def argv_for(share: str, start_at=start_at, offset=offset) -> list[str]:
            share_args = ["--share", share, "--offset", str(offset), "--jobs", str(top_jobs)]
            return [*base, *share_args, "--start-at", str(start_at)]

        outs = nodes.run(count, argv_for, limit)
        docs = [node_doc(o, model=ShareDoc) for o in outs]
        shares = sorted(int(d["share"]) for d in docs)
        if shares != list(range(count)):  # each node reports the share it was launched with, once
            raise ProbeError(f"storage probe at {count} nodes: the nodes reported shares {shares}, not 0-{count - 1}")
        if cfg.where.launcher != "slurm":  # ssh: share i ran on the suite's i-th host (Slurm: its own hostname)
            labels |= {str(d["host"]): nodes.names[int(d["share"])] for d in docs}
        level = judge_level(count, docs, level_launched, [o.received_at for o in outs], cfg.probe.probe_seconds)
        levels.append(level)
        if level["conclusive"]:
            aggregate.append({k: level[k] for k in ("nodes", "mb_s", "min_node_mb_s")})
        else:
            left_out.append({"nodes": count, "reason": level["reason"]})
        offset = max(int(d["next_offset"]) for d in docs)
    slow = probe_slow_nodes(levels, labels)  # named as the suite and its ranks name them
    return {
        **climb,
        "per_node_mb_s": per_node,
        "aggregate": aggregate,
        "bound": probe_bound(slow, aggregate_bound(aggregate, per_node)),
        "bound_rule": f"node: {NODE_RULE}; otherwise {BOUND_RULE}",
        "slow_nodes": slow,
        "node_levels": levels,
        "left_out": left_out,
        # as the launcher names them (ssh: the suite's hosts); Slurm's node names, as its tasks reported
        "nodes": nodes.names
        if cfg.where.launcher != "slurm" or not levels
        else [p["host"] for p in levels[-1]["per_node"]],
        "start": "start-at timestamp",
        "conclusive": not reasons,
        "reason": "; ".join(r for r in reasons if r),
    }


def startup_s(climb: dict, launched: float, received_at: float) -> float:
    """How long starting a node's probe takes (ssh or srun, then Python), on the worker's clock alone:
    the climb's round trip less the time the node says it ran (its report time less its process start,
    both on the node's clock). A climb without them (or a node that says it ran longer than the round
    trip) gives 0: the lead is then MIN_LEAD_S."""
    extra = climb.get("extra") or {}
    ran = float(extra.get("reported_at", 0.0)) - float(extra.get("process_started_at", 0.0))
    if not received_at or "reported_at" not in extra or ran < 0:
        return 0.0
    return max(0.0, (received_at - launched) - ran)


def judge_level(count: int, docs: list[dict], launched: float, received: list[float], seconds: float) -> dict:
    """The level `count` nodes read together (_aggregate_level), with `conclusive` and `reason`: not
    conclusive where any node re-read files (`fresh` false), read for less than MIN_LEVEL_S, started more
    than LATE_SHARE of a level late, or reported times (process start, read window, report) that do not
    fit inside the worker's span for that node, from `launched` to `received` (its clock) give or take
    LATE_SHARE of a level: that node's clock is not the worker's, so its start-at was not the others'."""
    tolerance = LATE_SHARE * seconds
    why = []
    for doc, got in zip(docs, received, strict=True):
        node = f"node {doc['host']}"
        if not doc["fresh"]:
            why.append(f"{node} re-read files an earlier read had touched (not a cold read)")
        if too_short(doc["seconds"]):
            why.append(f"{node} read for {doc['seconds']:.2f} s (under {MIN_LEVEL_S:.0f} s: not a sustained rate)")
        if doc["late_s"] > tolerance:
            why.append(f"{node} started {doc['late_s']:.2f} s after the others")
        times = (doc["process_started_at"], doc["started_at"], doc["started_at"] + doc["seconds"], doc["reported_at"])
        if min(times) < launched - tolerance or max(times) > got + tolerance:
            span = f"{min(times) - launched:+.2f} s to {max(times) - got:+.2f} s"
            why.append(f"{node} reported times outside the worker's span for it ({span}): its clock is out of step")
    level = _aggregate_level(count, docs)
    reason = "; ".join(why)
    return {**level, "conclusive": not why, "reason": f"at {count} nodes: {reason}" if why else ""}


def _aggregate_level(count: int, docs: list[dict]) -> dict:
    """What the store served `count` nodes together: all bytes over the window from the first start to
    the last end; the slowest node's own MB/s beside it."""
    first = min(d["started_at"] for d in docs)
    last = max(d["started_at"] + d["seconds"] for d in docs)
    nbytes = sum(int(d["bytes"]) for d in docs)
    return {
        "nodes": count,
        "mb_s": nbytes / max(last - first, 1e-9) / 1e6,
        "min_node_mb_s": min(float(d["mb_s"]) for d in docs),
        "bytes": nbytes,
        "seconds": last - first,
        "fresh": all(d["fresh"] for d in docs),
        "per_node": [{k: d[k] for k in ("host", "mb_s", "bytes", "seconds", "late_s", "fresh")} for d in docs],
    }


def write_probe(out: Path, doc: dict, name: str) -> None:
    """The probe's document in the run folder, written through the folder's descriptor (bench.safe_fs): a
    link planted at its temp name or its name (a run folder on a shared store) is never written through."""
    from bench.safe_fs import open_root, write_atomic

    out.mkdir(parents=True, exist_ok=True)
    with open_root(out) as dir_fd:
        write_atomic(dir_fd, name, json.dumps(doc, allow_nan=False).encode())
