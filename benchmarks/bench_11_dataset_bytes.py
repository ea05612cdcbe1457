"""Benchmark section 11: dataset-only bytes by each counter, cold and warm, local and over sshfs."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from runner import (
    ROOT,
    Context,
    main_for,
    train,
)

NUMBER = 11
TITLE = "dataset bytes"


def _evict(paths) -> None:
    for f in paths:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _libraries() -> list[Path]:
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    return [*(site / "torch").rglob("*.so*"), *(site / "nvidia").rglob("*.so*")]


def dataset_bytes_truth(tmp: Path, r: int, add) -> None:
    """Reported / true dataset bytes with the libraries cold too (a fresh node), on local disk and on an
    sshfs mount; the mount's MB/s against a tc limit on the server's link."""
    from bench.data.generate import GenerateSpec, generate
    from bench.data.stage import stage

    sys.path.insert(0, str(ROOT))  # the namespace sshd the tests use: a real network mount
    from tests.infra.ssh_hosts import SshHosts, link_rate_limit, sh

    src = tmp / "truth" / "coco"
    generate(GenerateSpec("coco", src, images=120, min_side=700, max_side=900, seed=6))
    true_bytes = sum(f.stat().st_size for f in (src / "images").iterdir())
    files = [f for f in src.rglob("*") if f.is_file()]
    io = ["--workload", "ssd", "--epochs", "1", "--batch-size", "8", "--sample-interval", "0.25"]
    local = []
    for _ in range(r):
        _evict(_libraries())
        _evict(files)
        local.append(train([*io, "--data", str(src)])["storage"]["first_epoch_bytes_by_source"])
    for source in ("cachestat", "procio"):
        ratio = statistics.median(b[source] for b in local) / true_bytes
        add(
            "11 dataset",
            f"local disk, cold libraries: {source} bytes / true bytes",
            f"{ratio:.4f}",
            "target within 0.98-1.02" if source == "cachestat" else "the process counter: libraries included",
        )
    from bench.metrics.sources.pagecache import SCAN_BUDGET_S, PageCacheSource

    scanner = PageCacheSource(src)
    start = time.perf_counter()
    for _ in range(50):
        scanner.settle()
    per_file = (time.perf_counter() - start) / 50 / len(scanner.files)
    add(
        "11 dataset",
        "page-cache scan cost per dataset file (open, cachestat, close; us)",
        f"{per_file * 1e6:.1f}",
        f"a sample scans at most {SCAN_BUDGET_S * 1e3:g} ms: <= {SCAN_BUDGET_S * 4:.0%} of one core at 4 Hz; "
        f"default dataset (1,536 files) in {1536 * per_file * 1e3:.0f} ms per full pass",
    )
    hosts = SshHosts(tmp / "truth-ssh", count=1, prefix="swbf").start()
    point, export = tmp / "truth-mnt", tmp / "truth-export"
    point.mkdir()
    export.mkdir()
    opts = f"IdentityFile={hosts.client_key},UserKnownHostsFile={hosts.known_hosts},StrictHostKeyChecking=yes"
    try:
        sh("sshfs", f"root@{hosts.ip(0)}:{export}", str(point), "-o", f"{opts},BatchMode=yes,kernel_cache")
        stage(src, point / "coco")
        served = [f for f in (export / "coco").rglob("*") if f.is_file()]
        cold, warm = [], []
        for _ in range(r):
            _evict(served)
            epochs = train([*io[:2], "--epochs", "2", *io[4:], "--data", str(point / "coco")])["epochs"]
            cold.append(epochs[0]["bytes_from_storage"] / true_bytes)
            warm.append(epochs[1]["bytes_from_storage"] / true_bytes)
        add(
            "11 dataset",
            "sshfs mount, cold epoch: cachestat bytes / true bytes",
            f"{statistics.median(cold):.4f}",
            "target within 0.98-1.02",
        )
        add(
            "11 dataset",
            "sshfs mount, warm epoch: cachestat bytes / true bytes",
            f"{statistics.median(warm):.4f}",
            "target ~0 (client page cache, kernel_cache)",
        )
        limit, rates = 3e6, []
        with link_rate_limit([f"{hosts.prefix}0"], "24Mbit"):
            for _ in range(r):
                _evict(served)
                rates.append(train([*io, "--data", str(point / "coco")])["epochs"][0]["avg_read_mb_s"])
        add(
            "11 dataset",
            "sshfs mount: epoch-1 MB/s / tc tbf limit (24 mbit = 3 MB/s)",
            f"{statistics.median(rates) / (limit / 1e6):.3f}",
            "target within 0.90-1.10 (TCP/ssh framing inside the limit)",
        )
    finally:
        subprocess.run(["fusermount", "-u", "-z", str(point)], capture_output=True)
        hosts.stop()


def run(ctx: Context) -> None:
    dataset_bytes_truth(ctx.tmp, ctx.repeats, ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
