"""`bench project` checked against runs it can be checked against: 1, 2 and 4 ranks over two namespace
hosts (2 slots each) whose links carry a `tc` rate limit (`ssh_hosts.link_rate_limit`), reading a store
on a device of its own under a cgroup-v1 blkio throttle. The projection is made from what one rank and
the storage probe measure (the 1-rank synthetic rate as the compute ceiling, the fio ceiling, the
dataset's bytes per image, the model's gradient bytes) and a cluster file that describes this layout
(2 nodes x 2 GPUs; between them the bus bandwidth of the smallest allreduce across it, 2 ranks);
then 1, 2 and 4 ranks run for real under the same limits and each one's images/s is set beside its
projection.

The limits are chosen so that each component binds where it is meant to, with room to spare, and the
parts of the model this 2-core box cannot honour (compute across ranks that share 2 cores) bind nowhere:
1 and 2 ranks (one host) are held by the store, 4 ranks (both hosts) by the link. Benchmark section 14
(docs/benchmarks.md, 14) runs FULL and holds each projection to 15% of what ran; the slow test
tests/bench/analysis/test_project_measured.py runs SHORT, the same path with a faster link, fewer steps
and shorter windows, and holds the mechanism: which component binds where, and figures that come from
what was measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.analysis.cluster import rate_bytes_s
from bench.config.models import HostSlots, RunSpec, TrainConfig
from bench.launch.base import collect, wait
from bench.launch.registry import build_launcher
from tests.conftest import BENCH
from tests.infra.faults import blkio_read_throttle, store_device
from tests.infra.ssh_hosts import SshHosts, link_rate_limit

WORKLOAD = "ssd"
BATCH = 8
# The cluster file's link is the bus bandwidth an allreduce measured across it, as nccl-tests measure a
# fabric: the smallest allreduce that crosses it (2 ranks, one per host; synthetic data, so the store plays
# no part). A link cannot be measured by one rank. On these links a 2-rank allreduce gets 0.95-0.96 of the
# line and a 4-rank one 0.91-0.95; over tbf's single 400 ms FIFO they got 0.68-0.76 and 0.75-0.90.
LINK_LATENCY = "0.2ms"  # namespace veths through a bridge: a hop costs well under a millisecond
STORE_MB = 256  # the store's own device: the dataset (~20 MB) and room to spare
TOLERANCE = 0.15


@dataclass(frozen=True)
class Setup:
    """The limits and run lengths of one check."""

    images: int = 900
    # The store feeds this many images/s: well under one rank's decode rate on this box at these sizes
    # (~100; at 480-560 px one rank decoded only ~28 images/s, and 1 rank was held by its core, not the
    # store), so the store binds at 1 and 2 ranks, and lies far above what the link lets 4 ranks do.
    store_img_s: float = 30.0
    # 2 Mbit/s between the hosts: SSD tiny's 2.4 MB of gradients take ~15 s per step at 4 ranks (each
    # host's link carries 2(n-1)/n = 1.5 x the gradients), 4 x 8 / 15 = ~2.1 images/s, far under what the
    # store feeds. What the step adds beyond that is what the model leaves out: 4 ranks share 2 cores at
    # 99% busy while the link binds, and the step's allreduce ran 8-10% slower than the 2-rank probe
    # predicts (at 4 Mbit/s, 10-15%, too close to the tolerance).
    link: str = "2Mbit"
    steps: int = 6  # measured steps per run, at least
    min_measure_s: float = 8.0  # and at least this long
    probe_seconds: float = 3.0  # per level of the fio probe under the throttle


# The benchmark's: each projection held to 15% of what ran (6-7 minutes).
FULL = Setup()
# The test's (about 2 minutes): an 8 Mbit/s link (a 4-rank step ~3.6 s, still ~20x the compute that 4 ranks
# on 2 cores spend), 3 steps, 3-s windows, 2-s probe levels, and a dataset no run reads past its end
# (a second pass would come from the page cache, not the throttled store).
SHORT = Setup(images=300, link="8Mbit", steps=3, min_measure_s=3.0, probe_seconds=2.0)
SCALES = (1, 2, 4)
# FULL's, by the names benchmark section 14 reads
STORE_IMG_S, LINK, IMAGES = FULL.store_img_s, FULL.link, FULL.images


@dataclass(frozen=True)
class Checked:
    gpus: int
    measured_img_s: float
    projected_img_s: float
    bound_by: str
    # The allreduce of one step's gradients: the run's own probe (after its steps) and the model's; None at 1
    measured_allreduce_s: float | None = None
    projected_allreduce_s: float | None = None

    @property
    def error(self) -> float:
        return self.projected_img_s / self.measured_img_s - 1

    @property
    def allreduce_error(self) -> float | None:
        if not self.measured_allreduce_s or self.projected_allreduce_s is None:
            return None
        return self.projected_allreduce_s / self.measured_allreduce_s - 1


def _run(
    hosts: SshHosts, setup: Setup, out: Path, data: Path | None, layout: tuple[int, ...], name: str, **train
) -> dict:
    """One run through the ssh launcher, `layout` ranks per namespace host; its summary."""
    cfg = {
        "workload": WORKLOAD,
        "data": data,
        "steps": setup.steps,
        "warmup_steps": 1,
        "batch_size": BATCH,
        "min_measure_s": setup.min_measure_s,
        "sample_interval_s": 0.5,
    } | train
    spec = RunSpec(
        run_id=f"proj-{name}",
        train=TrainConfig(**cfg),
        ranks=sum(layout),
        output_dir=out / name,
        python=Path(sys.executable),
        hosts=tuple(HostSlots(host=hosts.ip(i), slots=n) for i, n in enumerate(layout)),
        rendezvous_addr=hosts.gateway,
    )
    launcher = build_launcher("ssh", ssh=hosts.options())
    handle = launcher.submit(spec)
    state, reason = wait(launcher, handle, 900, 0.5)
    result = collect(handle, state, reason, spec.ranks)
    if not result.ok:
        raise RuntimeError(f"{name}: {result.reason}")
    return result.summary


def _dataset(root: Path, store: Path, images: int) -> tuple[Path, float]:
    from bench.data.generate import GenerateSpec, generate
    from bench.data.stage import stage

    src = root / "src" / "coco"
    generate(GenerateSpec("coco", src, images=images, min_side=256, max_side=320, seed=14))
    staged = store / "staged"
    stage(src, staged)
    images = list((src / "images").iterdir())
    return staged, sum(f.stat().st_size for f in images) / len(images)


def _gradient_bytes() -> int:
    from bench.models.registry import build
    from bench.train.dist.allreduce_probe import gradient_bytes

    image_size = TrainConfig.model_fields["image_size"].default  # what every run here trains at
    return gradient_bytes(build(WORKLOAD, "tiny", image_size).model)


@dataclass(frozen=True)
class Projection:
    """One check: what the projection was made from (each measured here) and each scale beside its run."""

    setup: Setup
    compute_img_s: float  # the 1-rank synthetic rate
    store_mb_s: float  # the blkio throttle
    ceiling_mb_s: float  # what fio read under it
    line_bytes_s: float  # the link's rate limit
    link_bytes_s: float  # the bus bandwidth of the 2-rank allreduce across it: the cluster file's link
    bytes_per_image: float
    checked: tuple[Checked, ...]

    def at(self, gpus: int) -> Checked:
        return next(c for c in self.checked if c.gpus == gpus)


def check_projection(root: Path, hosts: SshHosts, setup: Setup = FULL) -> Projection:
    """Measure the 1-rank ceilings and the storage under the limits, project 1, 2 and 4 GPUs with
    `bench project --json`, run them, and pair each projection with its measurement."""
    root.mkdir(parents=True, exist_ok=True)
    sshd = [p.pid for p in hosts.procs]  # each host's sshd forks its ranks: their mount namespace and groups
    with store_device(root / "store.img", root / "store", STORE_MB, pids=sshd) as store:
        return _check(root, hosts, setup, sshd, *_dataset(root, store, setup.images))


def _check(root: Path, hosts: SshHosts, setup: Setup, sshd: list[int], staged: Path, per_image: float) -> Projection:
    """The measurements and the projection; `sshd` are the hosts' sshd, whose ranks inherit the blkio group."""
    out = root / "runs"
    store_rate = int(setup.store_img_s * per_image)
    namespaces = [hosts.namespace(i) for i in range(hosts.count)]
    # Outside the limits: the compute ceiling (no store, no link at 1 rank). The throttle holds the store's
    # device only, so the ranks' libraries load at the disk's rate whatever the page cache has kept.
    compute = _run(hosts, setup, out, None, (1,), "syn-1", synthetic=True)["images_per_s"]
    with blkio_read_throttle(staged, store_rate, pids=sshd) as prefix, link_rate_limit(namespaces, setup.link):
        fio = [BENCH, "storage", "probe", "--path", str(staged), "--max-jobs", "2", "--json"]
        fio += ["--seconds", f"{setup.probe_seconds:g}"]
        probe = subprocess.run(
            ["sh", "-c", f'{prefix} && exec "$@"', "sh", *fio], capture_output=True, text=True, timeout=300, check=True
        )
        ceiling = json.loads(probe.stdout)["ceiling_mb_s"]
        across = _run(hosts, setup, out, None, (1, 1), "link-2", synthetic=True, steps=1, min_measure_s=0.0)
        link = across["allreduce"]["bus_gb_s"] * 1e9  # 2 ranks: busbw = bytes / seconds
        measured = {
            n: _run(hosts, setup, out, staged, layout, f"real-{n}") for n, layout in ((1, (1,)), (2, (2,)), (4, (2, 2)))
        }
    cluster = root / "cluster.yaml"
    cluster.write_text(
        "name: two-namespace-hosts\nnodes: 2\ngpus_per_node: 2\n"
        f"intra_node_link: 10Gbit\ninter_node_link: {link:.0f}B/s\nlatency: {LINK_LATENCY}\n"
    )
    flags = {
        "--workload": WORKLOAD,
        "--gpus": ",".join(map(str, SCALES)),
        "--cluster": str(cluster),
        "--compute-img-s": f"{compute:.6g}",
        "--batch-size": str(BATCH),
        "--allreduce-bytes": f"{_gradient_bytes()}B",
        "--bytes-per-image": f"{per_image:.0f}B",
        "--storage-ceiling": f"{ceiling:.6g}MB/s",
    }
    argv = [BENCH, "project", "--json", *(x for pair in flags.items() for x in pair)]
    projected = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    rows = {r["gpus"]: r for r in json.loads(projected.stdout)["projections"]}
    checked = tuple(
        Checked(
            n,
            float(measured[n]["images_per_s"]),
            float(rows[n]["images_per_s"]),
            rows[n]["bound_by"],
            (measured[n].get("allreduce") or {}).get("seconds"),
            rows[n]["allreduce_s"] if n > 1 else None,
        )
        for n in SCALES
    )
    return Projection(
        setup,
        float(compute),
        store_rate / 1e6,
        float(ceiling),
        rate_bytes_s(setup.link),
        float(link),
        per_image,
        checked,
    )
