"""`bench project` checked against runs it can be checked against: 1, 2 and 4 ranks over two namespace
hosts (2 slots each) whose links carry a `tc tbf` limit, reading a store under a cgroup-v1 blkio
throttle. The projection is made from what one rank and the storage probe measure (the 1-rank synthetic
rate as the compute ceiling, the fio ceiling, the dataset's bytes per image, the model's gradient bytes)
and a cluster file that describes this layout (2 nodes x 2 GPUs; between them the bus bandwidth of the
smallest allreduce across the link, 2 ranks); then 1, 2 and 4 ranks run for real under the same limits
and each one's images/s is set beside its projection.

The limits are chosen so that each component binds where it is meant to, with room to spare, and the
parts of the model this 2-core box cannot honour (compute across ranks that share 2 cores) bind nowhere:
1 and 2 ranks (one host) are held by the store, 4 ranks (both hosts) by the link. Used by benchmark
section 14; not a test: the link's part does not hold to 15% on these links (docs/benchmarks.md, 14),
and a check that fails one run in two would be a flaky test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.config import HostSlots, RunSpec, TrainConfig
from bench.launch.base import collect, wait
from bench.launch.registry import build_launcher
from tests.conftest import BENCH
from tests.infra.faults import blkio_read_throttle
from tests.infra.ssh_hosts import SshHosts, link_rate_limit

WORKLOAD = "ssd"
BATCH = 8
IMAGES = 900
# The store feeds this many images/s: well under one rank's decode rate on this box at these sizes (~100;
# at 480-560 px one rank decoded only ~28 images/s, and 1 rank was held by its core, not the store), so
# the store binds at 1 and 2 ranks, and lies far above what the link lets 4 ranks do.
STORE_IMG_S = 30.0
# 4 Mbit/s between the hosts: SSD tiny's 2.4 MB of gradients take ~7.5 s per step at 4 ranks (each host's
# link carries 2(n-1)/n = 1.5 x the gradients), 4 x 8 / 7.5 = ~4 images/s, far under what the store feeds.
# What the step adds beyond that (4 ranks sharing 2 cores, TCP restarting after each compute gap behind a
# 400 ms tbf queue: ~0.5 s measured at 8 Mbit/s) is what the model leaves out; at this rate it is ~7%.
LINK = "4mbit"
# The cluster file's link is the bus bandwidth an allreduce measured across it, as nccl-tests measure a
# fabric: the smallest allreduce that crosses it (2 ranks, one per host; synthetic data, so the store plays
# no part). A link cannot be measured by one rank, and no other measurement of it predicts a ring's: on
# these tbf links one TCP stream gets 1.00 of the 4 Mbit/s line, one each way at once 0.53-0.56, and a
# 4-rank allreduce 0.86. Projected from the line rate less framing (3.83 Mbit/s), 4 ranks came out 17% high.
LINK_LATENCY = "0.2ms"  # namespace veths through a bridge: a hop costs well under a millisecond
SCALES = (1, 2, 4)
TOLERANCE = 0.15


@dataclass(frozen=True)
class Checked:
    gpus: int
    measured_img_s: float
    projected_img_s: float
    bound_by: str

    @property
    def error(self) -> float:
        return self.projected_img_s / self.measured_img_s - 1


def _run(hosts: SshHosts, out: Path, data: Path | None, layout: tuple[int, ...], name: str, **train) -> dict:
    """One run through the ssh launcher, `layout` ranks per namespace host; its summary."""
    cfg = {
        "workload": WORKLOAD,
        "data": data,
        "steps": 6,
        "warmup_steps": 1,
        "batch_size": BATCH,
        "min_measure_s": 8.0,
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


def _dataset(root: Path) -> tuple[Path, float]:
    from bench.data.generate import GenerateSpec, generate
    from bench.data.stage import stage

    src = root / "src" / "coco"
    generate(GenerateSpec("coco", src, images=IMAGES, min_side=256, max_side=320, seed=14))
    staged = root / "staged"
    stage(src, staged)
    images = list((src / "images").iterdir())
    return staged, sum(f.stat().st_size for f in images) / len(images)


def _gradient_bytes() -> int:
    from bench.models.registry import build
    from bench.train.dist.probe import gradient_bytes

    image_size = TrainConfig.model_fields["image_size"].default  # what every run here trains at
    return gradient_bytes(build(WORKLOAD, "tiny", image_size).model)


def check_projection(root: Path, hosts: SshHosts) -> list[Checked]:
    """Measure the 1-rank ceilings and the storage under the limits, project 1, 2 and 4 GPUs with
    `bench project --json`, run them, and pair each projection with its measurement."""
    out = root / "runs"
    staged, per_image = _dataset(root)
    store_rate = int(STORE_IMG_S * per_image)
    sshd = [p.pid for p in hosts.procs]  # every rank is forked by its host's sshd: it inherits the group
    namespaces = [f"{hosts.prefix}{i}" for i in range(hosts.count)]
    # Outside the limits: the compute ceiling (no store, no link at 1 rank), and one short real-data run
    # that pages torch's and DALI's libraries in, so no rank below loads them through the throttle
    # (each run evicts the dataset's own pages before it reads).
    compute = _run(hosts, out, None, (1,), "syn-1", synthetic=True)["images_per_s"]
    _run(hosts, out, staged, (1,), "libraries", steps=2, min_measure_s=0.0)
    with blkio_read_throttle(staged, store_rate, pids=sshd) as prefix, link_rate_limit(namespaces, LINK):
        fio = [BENCH, "storage", "probe", "--path", str(staged), "--max-jobs", "2", "--seconds", "3", "--json"]
        probe = subprocess.run(
            ["sh", "-c", f'{prefix} && exec "$@"', "sh", *fio], capture_output=True, text=True, timeout=300, check=True
        )
        ceiling = json.loads(probe.stdout)["ceiling_mb_s"]
        across = _run(hosts, out, None, (1, 1), "link-2", synthetic=True, steps=1, min_measure_s=0.0)
        link = across["allreduce"]["bus_gb_s"] * 1e9  # 2 ranks: busbw = bytes / seconds
        measured = {
            n: _run(hosts, out, staged, layout, f"real-{n}") for n, layout in ((1, (1,)), (2, (2,)), (4, (2, 2)))
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
    return [
        Checked(n, float(measured[n]["images_per_s"]), float(rows[n]["images_per_s"]), rows[n]["bound_by"])
        for n in SCALES
    ]
