"""The storage read from the compute nodes at once: fio on 1, 2, 4, ... nodes through the suite's launcher.

Why from the nodes and together: one client's fio measures that client's link (or the Airflow
worker's, which may not even mount the store), while a cluster's nodes read the store at once. One
node first climbs to its ceiling (bench.data.probe.probe: `ceiling_mb_s`, kept as before, and
`per_node_mb_s`); then 2, 4, ... nodes (and the suite's node count) each read their own disjoint,
cold share (bench.data.probe.probe_share) at that node's best parallelism, over one window.

Start barrier: a start-at timestamp handed to every node, which sleeps until it and then starts fio.
fio's own --client/--server mode was not used: it needs a fio server listening on a port of every node
(one more port through the cluster's firewall, open to anyone who reaches it, and started by someone
before the suite runs), while a timestamp travels in the argv of the ssh or srun that starts each
node's probe, needs only the nodes' clocks in step (NTP keeps them within milliseconds of a level that
lasts seconds), and works alike over ssh, srun and a local process. The lead time is twice the first
node's measured start-up (ssh, Python) plus a second; a node that starts more than LATE_SHARE of a
level late makes the probe inconclusive, naming the node, since its read did not overlap the others'.

A level's aggregate is every node's bytes over the window from the first node's start to the last
one's end: what the store served them together. `bound`: bench.data.probe.BOUND_RULE.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.config import SweepConfig
from bench.data.probe import BOUND_RULE, ProbeError, aggregate_bound, nodes_for
from bench.errors import DatasetError
from bench.suite.plan import dataset_dir, workload_names

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


def node_doc(out: NodeOutput, what: str = "storage probe") -> dict:
    """A node's JSON, or the error naming it: exit 2 is the dataset (unreadable, not staged there)."""
    if out.returncode != 0:
        lines = [x for x in out.stderr.strip().splitlines() if x.strip()]
        why = lines[-1] if lines else f"exit {out.returncode}"
        kind = DatasetError if out.returncode == 2 else ProbeError
        raise kind(f"{what} on node {out.node}: {why}")
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise ProbeError(f"{what} on node {out.node}: no JSON result ({out.stderr.strip()[-300:]})") from None


@dataclass
class LocalNodes:
    """One node: this machine (the local launcher trains here)."""

    names: list[str] = field(default_factory=lambda: ["localhost"])

    def run(self, count: int, argv_for, timeout: float) -> list[NodeOutput]:
        done = _communicate({"localhost": subprocess.Popen(argv_for("0/1"), **_PIPES)}, timeout)
        return done


@dataclass
class SshNodes:
    """The suite's ssh hosts, each reached as its ranks are (bench.launch.ssh_rendezvous.remote_command)."""

    ssh: object
    hosts: list
    env: dict[str, str]

    @property
    def names(self) -> list[str]:
        return [h.host for h in self.hosts]

    def run(self, count: int, argv_for, timeout: float) -> list[NodeOutput]:
        from bench.launch.ssh_rendezvous import remote_command

        procs = {}
        for i, host in enumerate(self.hosts[:count]):
            argv = self.ssh.argv(host, remote_command(self.env, argv_for(f"{i}/{count}")))  # type: ignore[attr-defined]
            procs[host.host] = subprocess.Popen(argv, **_PIPES)
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

    def run(self, count: int, argv_for, timeout: float) -> list[NodeOutput]:
        srun = ["srun", "--label", "--kill-on-bad-exit=0", "-N", str(count), "--ntasks-per-node=1", "-n", str(count)]
        srun += [f"--partition={self.cfg.partition}"] if self.cfg.partition else []
        srun += [f"--account={self.cfg.account}"] if self.cfg.account else []
        done = self.runner.run([*srun, *argv_for("slurm")], check=False, timeout=timeout)  # type: ignore[attr-defined]
        outs = {i: NodeOutput(f"slurm task {i}", 0, "", "") for i in range(count)}
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
        outs.append(NodeOutput(name, proc.returncode if proc.returncode is not None else 1, stdout, stderr))
    return outs


def suite_nodes(cfg: SweepConfig, launcher, env: dict[str, str] | None = None):
    """The nodes the suite trains on, as its launcher reaches them."""
    if cfg.launcher == "ssh":
        hosts = list({h.host: h for h in cfg.hosts}.values())
        return SshNodes(launcher.ssh, hosts, dict(env or {}))
    if cfg.launcher == "slurm":
        total = nodes_for("slurm", [], cfg.ranks_per_node or cfg.gpus_per_node or None, max(cfg.gpus))
        return SlurmNodes(launcher.runner, cfg, total)
    return LocalNodes()


def probe_nodes(cfg: SweepConfig, nodes, python: str | None = None) -> dict:
    """probe.json's document: one node's climb (its keys as before) with `per_node_mb_s`, `aggregate`
    ({nodes, mb_s, min_node_mb_s} per node count) and `bound`. Raises DatasetError or ProbeError naming
    the node that could not read."""
    python = python or sys.executable
    base = [python, "-m", "bench.data.probe", "--max-jobs", str(cfg.probe_max_jobs)]
    base += ["--seconds", str(cfg.probe_seconds)]
    for d in dict.fromkeys(dataset_dir(cfg, w) for w in workload_names(cfg)):
        base += ["--path", str(d)]
    limit = max(120.0, cfg.probe_seconds * 40)
    launched = time.time()
    climb = node_doc(nodes.run(1, lambda share: base, limit)[0])
    startup = max(0.0, float(climb.get("extra", {}).get("process_started_at", launched)) - launched)
    per_node = float(climb["ceiling_mb_s"])
    top_jobs = max([*climb["levels"], climb["repeat"]], key=lambda lv: lv["mb_s"])["jobs"]
    aggregate = [{"nodes": 1, "mb_s": per_node, "min_node_mb_s": per_node}]
    levels, reasons = [], [] if climb["conclusive"] else [climb["reason"]]
    offset = int(climb.get("extra", {}).get("next_offset", 0))
    for count in node_counts(len(nodes.names))[1:]:
        start_at = time.time() + MIN_LEAD_S + 2 * startup

        def argv_for(share: str, start_at=start_at, offset=offset) -> list[str]:
            return [
                *base,
                "--share",
                share,
                "--offset",
                str(offset),
                "--jobs",
                str(top_jobs),
                "--start-at",
                str(start_at),
            ]

        docs = [node_doc(out) for out in nodes.run(count, argv_for, limit)]
        level = _aggregate_level(count, docs)
        aggregate.append({k: level[k] for k in ("nodes", "mb_s", "min_node_mb_s")})
        levels.append(level)
        late = [d for d in docs if d["late_s"] > LATE_SHARE * cfg.probe_seconds]
        reasons += [f"node {d['host']} started {d['late_s']:.2f} s after the others at {count} nodes" for d in late]
        offset = max(int(d["next_offset"]) for d in docs)
    bound = aggregate_bound(aggregate, per_node)
    return {
        **climb,
        "per_node_mb_s": per_node,
        "aggregate": aggregate,
        "bound": bound,
        "bound_rule": BOUND_RULE,
        "node_levels": levels,
        # as the launcher names them (ssh: the suite's hosts); Slurm's node names, as its tasks reported
        "nodes": nodes.names if cfg.launcher != "slurm" or not levels else [p["host"] for p in levels[-1]["per_node"]],
        "start": "start-at timestamp",
        "conclusive": not reasons,
        "reason": "; ".join(r for r in reasons if r),
    }


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
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{name}.tmp"
    tmp.write_text(json.dumps(doc, allow_nan=False))
    tmp.replace(out / name)
