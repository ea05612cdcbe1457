"""Benchmark section 18: is the one slow node named (issue 49)? Faults injected for real over namespace
hosts, one node at a time, healthy runs between; the storage probe's node rule judges each run
(bench.analysis.verdict.nodes: `slow_nodes`, `bound: node`).

Four namespace hosts: host0 serves the store over sshfs, hosts 1-3 are the compute nodes, each mounting
it in its own mount namespace, each link held by `tc` to HEALTHY (so that a run's figures are the links',
not this 2-core box's). The fault, on one node at a time: its link held to a third of the others' (`tc`,
what it receives). Not measured here (yet): a node's CPU (a cgroup cpu quota slows its ranks' compute,
which the training's per-node compute rate shows, not a probe's reads: fio over sshfs uses a few percent
of a core) and its disk or mount (blkio: the nodes read the store over sshfs, which no block device of
theirs carries). Both need training runs per trial, minutes each on this box.

Figures: the share of injected faults whose node is named (alone) (goal >= 0.9) and the share of
healthy runs where none is named (goal >= 0.95), with the counts. `--repeats` rounds over every node and
kind. Needs root (namespaces, tc, cgroup v1 cpu), sshd, sshfs and fio, as the ssh suite tests do.
"""

from __future__ import annotations

import contextlib
import os
import sys

from runner import ROOT, Context, main_for

NUMBER = 18
TITLE = "node attribution"
HEALTHY, SLOW = "48Mbit", "16Mbit"
KINDS = ("link",)
NODES = (1, 2, 3)


@contextlib.contextmanager
def _cluster(tmp):
    """(hosts, cfg, env): the compute nodes' mounts and their healthy links for the section's life."""
    sys.path.insert(0, str(ROOT))
    import yaml

    from bench.config import SuiteSettings
    from bench.data.generate import GenerateSpec, generate
    from tests.dags.test_ssh_suite import ssh_config_text
    from tests.infra.ssh_hosts import SshHosts, download_rate_limit, sshfs_store
    from tests.infra.suite_files import suite_file

    hosts = SshHosts(tmp / "hosts", count=4, prefix="swbn").start()
    export, point = tmp / "export", tmp / "mnt"
    export.mkdir()
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
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    try:
        with sshfs_store(hosts, ssh_config, export, point, NODES), download_rate_limit(hosts, list(NODES), HEALTHY):
            yield hosts, cfg, env
    finally:
        hosts.stop()


@contextlib.contextmanager
def _fault(hosts, kind: str, node: int):
    """One node made slow: its link (tc, replacing its healthy shaping for the fault's life)."""
    from tests.infra.ssh_hosts import sh, shape

    if kind != "link":
        raise ValueError(f"kind {kind!r}: only 'link' is injected by this section")
    dev = f"{hosts.namespace(node)}h"
    sh("tc", "qdisc", "del", "dev", dev, "root")
    shape(("tc",), dev, SLOW)
    try:
        yield
    finally:
        sh("tc", "qdisc", "del", "dev", dev, "root", check=False)
        shape(("tc",), dev, HEALTHY)


def _named(cfg, env) -> list[str]:
    """The hosts the probe named (its slow_nodes), or None where the probe gave no conclusive level."""
    from bench.launch.registry import suite_launcher
    from bench.suite.probe import probe_nodes, suite_nodes

    doc = probe_nodes(cfg, suite_nodes(cfg, suite_launcher(cfg), env))
    return [s["host"] for s in doc["slow_nodes"]]


def run(ctx: Context) -> None:
    from bench.launch.registry import suite_launcher
    from bench.suite.run import stage_datasets

    section = f"{NUMBER} {TITLE}"
    injected = named = healthy = clean = 0
    misses: list[str] = []
    with _cluster(ctx.tmp) as (hosts, cfg, env):
        stage_datasets(cfg, suite_launcher(cfg), env)  # staged on a node, as the suite stages it
        for _ in range(ctx.repeats):
            for kind in KINDS:
                for node in NODES:
                    found = _named(cfg, env)  # a healthy run before each fault
                    healthy, clean = healthy + 1, clean + (not found)
                    if found:
                        misses.append(f"healthy run named {found}")
                    with _fault(hosts, kind, node):
                        found = _named(cfg, env)
                    injected += 1
                    if found == [hosts.ip(node)]:
                        named += 1
                    else:
                        misses.append(f"{kind} on {hosts.ip(node)}: named {found or 'none'}")
    ctx.add(section, "injected faults (one node's link, tc) whose node is named, alone", f"{named / injected:.2f}",
            f">= 0.9 ({named} of {injected})")  # fmt: skip
    ctx.add(section, "healthy runs naming no node", f"{clean / healthy:.2f}", f">= 0.95 ({clean} of {healthy})")
    for miss in misses[:5]:
        print(f"  miss: {miss}", flush=True)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
