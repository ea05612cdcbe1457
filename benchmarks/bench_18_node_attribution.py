"""Benchmark section 18: is the one slow node named (issue 49)? Faults injected for real over namespace
hosts, one node at a time, of three kinds, a healthy run before each; the node rule judges each run
(bench.analysis.verdict.nodes.NODE_RULE).

Four namespace hosts: host0 serves the store (an ext4 on a loop device of its own, its page cache capped
so that every read reaches the disk) over sshfs; hosts 1-3 are the compute nodes, each mounting it in its
own mount namespace, each link held by `tc` to HEALTHY (so that a run's figures are the links', not this
2-core box's). The faults, on one node at a time (tests/infra/node_faults.py says why each is made so):
- link: its link held to a third of the others' (`tc`, what it receives); judged by the storage probe
  (`slow_nodes`), a healthy probe before it;
- disk: its mount's reads held to a third of its link at the store's disk (blkio on the processes that
  serve its mount: an sshfs mount has no block device to throttle); judged by the probe, as the link;
- cpu: a cgroup cpu quota (CPU_CORES) on everything the node runs; judged by a 3-rank training run (one
  rank per node) through the suite's launcher, by its per-node compute rates (`slow_node` on the scale's
  figures: what `bottleneck: node` names; reads not judged, 4 steps are too short for a read rate), a
  healthy 3-rank run before it.

Figures: the share of injected faults whose node is named (alone) (goal >= 0.9) and the share of
healthy runs where none is named (goal >= 0.95), with the counts; a row per kind. `--repeats` rounds over
every node and kind. Needs root (namespaces, tc, loop devices, cgroup v1 blkio, cpu and memory), sshd,
sshfs and fio, as the ssh suite tests do.
"""

from __future__ import annotations

import contextlib
import os
import sys

from runner import ROOT, Context, main_for

NUMBER = 18
TITLE = "node attribution"
HEALTHY, SLOW = "48Mbit", "16Mbit"
READ_CAP = 2_000_000  # a third of HEALTHY's 6 MB/s, at the store's disk
CPU_CORES = 0.15  # the three ranks share this box's cores: a healthy one gets about a third of a core
CACHE_CAP = 16 << 20  # the store host's page cache, under the ~48 MB dataset
KINDS = ("link", "disk", "cpu")
NODES = (1, 2, 3)


def _env() -> dict[str, str]:
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


@contextlib.contextmanager
def _cluster(tmp):
    """(hosts, cfg, export): the store on its own device, the compute nodes' mounts and their healthy
    links for the section's life."""
    sys.path.insert(0, str(ROOT))
    import yaml

    from bench.config.models import SuiteSettings
    from bench.data.generate import GenerateSpec, generate
    from tests.dags.test_ssh_suite import ssh_config_text
    from tests.infra.faults import store_device
    from tests.infra.node_faults import store_page_cache_cap
    from tests.infra.ssh_hosts import SshHosts, download_rate_limit, sshfs_store
    from tests.infra.suite_files import suite_file

    hosts = SshHosts(tmp / "hosts", count=4, prefix="swbn").start()
    point = tmp / "mnt"
    point.mkdir()
    generate(GenerateSpec("coco", tmp / "source" / "coco", images=192, min_side=700, max_side=900, seed=6))
    ssh_config = tmp / "ssh_config"
    ssh_config.write_text(ssh_config_text(hosts))
    text = suite_file(
        "Three compute nodes reading one sshfs store.",
        launcher="ssh",
        hosts=[f"{hosts.ip(i)}:1" for i in NODES],
        ssh_config=str(ssh_config),
        dataset_path=str(point),
        stage_from=str(tmp / "source"),
        probe_max_jobs=1,
        probe_seconds=2.0,
    )
    doc = {k: v for k, v in yaml.safe_load(text).items() if k not in ("schedule", "description")}
    cfg = SuiteSettings(**doc).sweep_config(tmp, tmp / "out")
    try:
        with (
            store_device(tmp / "store.img", tmp / "export", 256, [hosts.procs[0].pid]) as export,
            store_page_cache_cap(hosts, CACHE_CAP),
            sshfs_store(hosts, ssh_config, export, point, NODES),
            download_rate_limit(hosts, list(NODES), HEALTHY),
        ):
            yield hosts, cfg, export
    finally:
        hosts.stop()


@contextlib.contextmanager
def _fault(hosts, export, kind: str, node: int):
    """One node made slow: its link (tc, replacing its healthy shaping), its mount's reads at the store's
    disk (blkio) or its CPU (a cgroup cpu quota), for the fault's life."""
    from tests.infra.node_faults import mount_read_throttle, node_cpu_quota
    from tests.infra.ssh_hosts import sh, shape

    if kind == "disk":
        with mount_read_throttle(hosts, node, export, READ_CAP):
            yield
    elif kind == "cpu":
        with node_cpu_quota(hosts, node, CPU_CORES):
            yield
    elif kind == "link":
        dev = f"{hosts.namespace(node)}h"
        sh("tc", "qdisc", "del", "dev", dev, "root")
        shape(("tc",), dev, SLOW)
        try:
            yield
        finally:
            sh("tc", "qdisc", "del", "dev", dev, "root", check=False)
            shape(("tc",), dev, HEALTHY)
    else:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")


def _probe_named(cfg, export) -> list[str]:
    """The hosts the probe named (its slow_nodes), the store's files evicted first (every read cold)."""
    from bench.launch.registry import suite_launcher
    from bench.suite.node_probe import probe_nodes, suite_nodes
    from tests.infra.node_faults import evict

    evict(export)
    doc = probe_nodes(cfg, suite_nodes(cfg, suite_launcher(cfg), _env()))
    return [s["host"] for s in doc["slow_nodes"]]


def _training_named(cfg, trial: str) -> list[str]:
    """The host a 3-rank run (one rank per node) names by its nodes' compute figures, as its scale's
    `slow_node` does ([] none); a run that gave no summary raises."""
    import json

    from bench.analysis.frame import node_figures_of
    from bench.analysis.verdict.nodes import slow_node
    from bench.launch.registry import suite_launcher
    from bench.suite.run import run_one

    result = run_one(cfg, suite_launcher(cfg), trial, "ssd", len(NODES))
    if not result.ok:
        raise RuntimeError(f"training run {trial} {result.state}: {result.reason}")
    host, _ = slow_node(json.loads(node_figures_of(result.summary)), [], reads_valid=False)
    return [host] if host else []


def _named(cfg, export, kind: str, trial: str) -> list[str]:
    return _training_named(cfg, trial) if kind == "cpu" else _probe_named(cfg, export)


def run(ctx: Context) -> None:
    from bench.launch.registry import suite_launcher
    from bench.suite.run import stage_datasets

    section = f"{NUMBER} {TITLE}"
    counts = {k: {"injected": 0, "named": 0, "healthy": 0, "clean": 0} for k in KINDS}
    misses: list[str] = []
    with _cluster(ctx.tmp) as (hosts, cfg, export):
        stage_datasets(cfg, suite_launcher(cfg), _env())  # staged on a node, as the suite stages it
        for r in range(ctx.repeats):
            for kind in KINDS:
                c = counts[kind]
                for node in NODES:
                    found = _named(cfg, export, kind, f"healthy-{kind}-{node}-{r}")  # a healthy run before each
                    c["healthy"], c["clean"] = c["healthy"] + 1, c["clean"] + (not found)
                    if found:
                        misses.append(f"healthy {kind} run named {found}")
                    with _fault(hosts, export, kind, node):
                        found = _named(cfg, export, kind, f"{kind}-{node}-{r}")
                    c["injected"] += 1
                    if found == [hosts.ip(node)]:
                        c["named"] += 1
                    else:
                        misses.append(f"{kind} on {hosts.ip(node)}: named {found or 'none'}")
    what = {"link": "its link, tc", "disk": "its mount's reads at the store's disk, blkio",
            "cpu": "its CPU, a cgroup cpu quota"}  # fmt: skip
    t = {key: sum(c[key] for c in counts.values()) for key in ("injected", "named", "healthy", "clean")}
    ctx.add(section, "injected faults (one node: link, disk, cpu) whose node is named, alone",
            f"{t['named'] / t['injected']:.2f}", f">= 0.9 ({t['named']} of {t['injected']})")  # fmt: skip
    ctx.add(section, "healthy runs naming no node", f"{t['clean'] / t['healthy']:.2f}",
            f">= 0.95 ({t['clean']} of {t['healthy']})")  # fmt: skip
    for kind, c in counts.items():
        ctx.add(section, f"{kind} faults ({what[kind]}) whose node is named, alone",
                f"{c['named'] / c['injected']:.2f}", f">= 0.9 ({c['named']} of {c['injected']})")  # fmt: skip
        ctx.add(section, f"healthy runs before {kind} faults naming no node", f"{c['clean'] / c['healthy']:.2f}",
                f">= 0.95 ({c['clean']} of {c['healthy']})")  # fmt: skip
    for miss in misses[:8]:
        print(f"  miss: {miss}", flush=True)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
