"""Benchmark section 24: object storage under test (issue 64), against a real Ceph RGW on this machine.

What it measures, each against a blkio throttle on the OSD's own loop device (the store's real limit: the
OSD reads and writes with O_DIRECT and keeps no read cache, tests/infra/ceph_rgw.py):
- the read ceiling the suite's S3 probe finds (`bench.storage.s3_probe`: ranged GETs at 1, 2, 4 streams);
- what one emulated rank reads in its first epoch (`bench train` over `s3://`, the records reader's
  counted ranged GETs, 4 loader threads, an accelerator that waits 1 ms a batch: the reader binds);
- boto3's own parallel whole-object GETs on the same objects (4 threads, a client each): the reference;
- checkpoint write and restore MB/s of the phase (`bench.storage.checkpoint_s3`, multipart, verified).
And the client overhead where no throttle holds the store (a 512 MiB dataset, so no reader runs out of
objects): the probe's 4-stream level over boto3's 4 streams of whole objects, and the rank's epoch-1 rate
over boto3's 4 streams of ranged GETs the size of its records, in interleaved pairs (runner.paired).

Each repeat runs every throttle level once, rotating which reader goes first; values are medians over the
repeats with the spread of the ratio to the throttle (a t-interval on the log ratios).
Where s3torchconnector is importable (it is not a requirement; `pip install --no-deps --target DIR
s3torchconnector s3torchconnectorclient` and DIR on PYTHONPATH), its CRT client reading the same whole
objects is compared with boto3's the same way: the measurement behind reading with boto3.
Usage: python benchmarks/bench_24_s3.py [--repeats N] (or `scripts/bench.sh --only 24`); needs root and
Debian's Ceph (scripts/install.sh --with-test-services).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import BIN, Context, Skipped, describe, main_for, paired, ratio_interval

NUMBER = 24
TITLE = "s3"
MiB = 1 << 20
READ_LIMITS = (8 * MiB, 16 * MiB, 32 * MiB)  # bytes/s on the OSD's device
WRITE_LIMIT, RESTORE_LIMIT = 16 * MiB, 24 * MiB
STREAMS = 4
PER_FILE, RECORD = 8, MiB  # 1 MiB records in 8 MiB objects
# 128 MiB read under the throttles (16 s at the lowest); 512 MiB where nothing holds the store (so no
# reader runs out of objects within its seconds)
DATASETS = {"records": 16, "big": 64}
BUCKET = "bench24"
SECONDS = 2.0  # per probe level and per boto3 reading


def parallel_mb_s(fetch: Callable[[int, int], object], streams: int, seconds: float) -> float:
    """MB/s of `streams` threads reading for `seconds`: stream i reads bodies fetch(i, i), fetch(i, i +
    streams), ... whole (each a file-like `read`), each from a different start."""
    received = [0] * streams
    deadline = time.monotonic() + seconds

    def read(i: int) -> None:
        n = i
        while time.monotonic() < deadline:
            body = fetch(i, n)
            while chunk := body.read(MiB):
                received[i] += len(chunk)
            n += streams

    started = time.monotonic()
    threads = [threading.Thread(target=read, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(received) / (time.monotonic() - started) / 1e6


def boto3_get_mb_s(
    make_client: Callable, objects: list[tuple[str, str]], streams: int, seconds: float, stripe: int = 0
) -> float:
    """boto3's own GETs, the reference for the client overhead: a client per stream, round robin over the
    objects (whole, or in `stripe`-byte ranged GETs)."""
    clients = [make_client() for _ in range(streams)]
    parts = [(b, k, "") for b, k in objects] if not stripe else [
        (b, k, f"bytes={o}-{o + stripe - 1}") for b, k in objects for o in range(0, PER_FILE * RECORD, stripe)
    ]  # fmt: skip

    def fetch(i: int, n: int):
        bucket, key, span = parts[n % len(parts)]
        return clients[i].get_object(Bucket=bucket, Key=key, **({"Range": span} if span else {}))["Body"]

    return parallel_mb_s(fetch, streams, seconds)


def s3torchconnector_get_mb_s(env: dict, objects: list[tuple[str, str]], streams: int, seconds: float) -> float:
    """The same whole-object reading through s3torchconnector's CRT client (one client, as its datasets
    share one)."""
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client

    keys = {k: v for k, v in env.items() if k.startswith("AWS_")}
    before = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)  # the CRT reads its keys there, as it makes its requests
    try:
        config = S3ClientConfig(force_path_style=True)
        client = S3Client("us-east-1", endpoint=env["AWS_ENDPOINT_URL"], s3client_config=config)
        return parallel_mb_s(lambda i, n: client.get_object(*objects[n % len(objects)]), streams, seconds)
    finally:  # the process's own environment as it was (a later section must not inherit the RGW's keys)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def rank_read_mb_s(env: dict, url: str, out: Path) -> float:
    """One emulated rank's epoch-1 read MB/s over the bucket (the bytes its GETs received over the epoch)."""
    args = ["--workload", "s3-read", "--data", url, "--accelerator-s", "0.001", "--batch-size", "4"]
    args += ["--epochs", "1", "--warmup-steps", "0", "--loader-threads", str(STREAMS), "--backend", "ddp"]
    args += ["--metrics-out", str(out), "--sample-interval", "0.2"]
    done = subprocess.run([str(BIN / "bench"), "train", *args], capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"bench train over {url}: {done.stderr[-1500:]}")
    epoch = json.loads((out / "summary.json").read_text())["epochs"][0]
    return epoch["bytes_from_storage"] / epoch["seconds"] / 1e6


def summarize(values: list[float], limit: float) -> str:
    """'median MB/s (ratio to the limit median, 95% CI lo-hi, n)'."""
    ratios = [v / (limit / 1e6) for v in values]
    _, lo, hi = ratio_interval(ratios)
    middle = statistics.median(ratios)
    return f"{statistics.median(values):.1f} MB/s ({middle:.3f} of it, 95% CI {lo:.3f}-{hi:.3f}, n={len(values)})"


class Store:
    """The RGW, a bucket, the staged records and what each reader needs of them."""

    def __init__(self, rgw, root: Path) -> None:
        from bench.data.location import credentials_from_env, s3_client

        self.rgw = rgw
        self.make_client = lambda: s3_client(credentials_from_env(rgw.env()))
        self.make_client().create_bucket(Bucket=BUCKET)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | rgw.env()
        self.root = root
        self.runs = 0
        self.staged = {name: self.stage(name, files) for name, files in DATASETS.items()}

    def stage(self, name: str, files: int) -> tuple:
        """`files` objects of PER_FILE records staged under `name`: (its location, its (bucket, key)s)."""
        from bench.data.location import S3Location
        from bench.data.records import RecordsSpec, generate_records
        from bench.data.stage_s3 import stage_to_s3

        manifest = generate_records(RecordsSpec("raw", files, PER_FILE, RECORD, seed=24), self.root / name)
        location = S3Location(BUCKET, name)
        stage_to_s3(self.make_client(), self.root / name, location)
        return location, [(BUCKET, location.key(f["name"])) for f in manifest["files"]]

    def probe(self, name: str = "records"):
        from bench.storage.s3_probe import S3ProbeSettings, probe_s3

        settings = S3ProbeSettings(max_streams=STREAMS, seconds=SECONDS)
        return probe_s3(self.make_client, [self.staged[name][0]], settings)

    def ceiling(self) -> float:
        result = self.probe()
        if not result.conclusive:
            raise RuntimeError(f"the probe was inconclusive: {result.reason}")
        return float(result.ceiling_mb_s)

    def probe_level_mb_s(self, name: str = "big") -> float:
        """The probe's own 4-stream level (its GETs, its clients, SECONDS long)."""
        return float(next(lv["mb_s"] for lv in self.probe(name).levels if lv["jobs"] == STREAMS))

    def boto3(self, name: str = "records", stripe: int = 0) -> float:
        return boto3_get_mb_s(self.make_client, self.staged[name][1], STREAMS, SECONDS, stripe)

    def rank(self, name: str = "records") -> float:
        self.runs += 1
        return rank_read_mb_s(self.env, self.staged[name][0].url, self.root / f"rank-{self.runs}")

    def checkpoint(self) -> dict:
        """One rank, 2 checkpoints of 48 MiB then 2 restores, under the write and restore throttles."""
        from bench.config.checkpoint import CheckpointSpec
        from bench.data.location import S3Location
        from bench.storage.checkpoint import aggregate
        from bench.storage.checkpoint_s3 import run_rank_s3
        from tests.infra.ceph_rgw import osd_throttle

        class Alone:
            def allgather(self, obj):
                return [obj]

        spec = CheckpointSpec(mode="size", bytes_per_rank=48 * MiB, writes=2, reads=2)
        with osd_throttle(self.rgw, WRITE_LIMIT, "write"), osd_throttle(self.rgw, RESTORE_LIMIT, "read"):
            record = run_rank_s3(0, 1, S3Location(BUCKET, "ckpt"), spec, Alone(), self.make_client(), host="n1")
        return aggregate([record])


def measure(store: Store, repeats: int) -> dict:
    """Every throttle level once a repeat (the readers' order rotated), then the checkpoint phase."""
    from tests.infra.ceph_rgw import osd_throttle

    readers = {"probe ceiling": store.ceiling, "rank epoch 1": store.rank, "boto3": store.boto3}
    got: dict = {(name, limit): [] for name in readers for limit in READ_LIMITS} | {"write": [], "restore": []}
    for r in range(repeats):
        for limit in READ_LIMITS:
            names = list(readers)
            names = names[r % 3 :] + names[: r % 3]
            with osd_throttle(store.rgw, limit, "read"):
                for name in names:
                    got[name, limit].append(float(readers[name]()))
        phase = store.checkpoint()
        got["write"].append(float(phase["write_mb_s"]))
        got["restore"].append(float(phase["read_mb_s"]))
    return got


def run(ctx: Context) -> None:
    if shutil.which("radosgw") is None or os.geteuid() != 0:
        raise Skipped("needs root and Debian's Ceph (scripts/install.sh --with-test-services)")
    from tests.infra.ceph_rgw import ceph_rgw

    root = Path(tempfile.mkdtemp(prefix="bench24-", dir="/var/tmp"))
    try:
        with ceph_rgw(root / "cluster") as rgw:
            store = Store(rgw, root)
            got = measure(store, ctx.repeats)
            unheld = unthrottled(store)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    label = "24 s3"
    for limit in READ_LIMITS:
        for name in ("probe ceiling", "rank epoch 1", "boto3"):
            ctx.add(
                label,
                f"read throttle {limit // MiB} MiB/s on the OSD: {name} MB/s",
                f"{statistics.median(got[name, limit]):.1f}",
                summarize(got[name, limit], limit) + "; target within 10% of the throttle",
            )
    for kind, limit in (("write", WRITE_LIMIT), ("restore", RESTORE_LIMIT)):
        ctx.add(
            label,
            f"checkpoint {kind} MB/s under a {limit // MiB} MiB/s {kind} throttle (2 x 48 MiB, multipart)",
            f"{statistics.median(got[kind]):.1f}",
            summarize(got[kind], limit) + "; target within 10% of the throttle",
        )
    for name, (p, mine, reference) in unheld.items():
        ctx.add(
            label,
            f"no throttle: {name}",
            f"{p['ratio']:.3f}",
            describe(p, f"no target: the client overhead (1.0 = none); medians {mine:.0f} vs {reference:.0f} MB/s"),
        )


def unthrottled(store: Store) -> dict[str, tuple[dict, float, float]]:
    """Where nothing holds the store, each of the suite's readers over boto3's own GETs of the same size on
    the same objects, in interleaved pairs: {figure: (paired ratio, median MB/s, boto3's median MB/s)}."""
    cases = {
        "probe 4-stream level (4 MiB ranged GETs) / boto3 4 streams of whole 8 MiB objects": (
            store.probe_level_mb_s,
            lambda: store.boto3("big"),
        ),
        "rank epoch-1 read (1 MiB records, 4 loader threads) / boto3 4 streams of 1 MiB ranged GETs": (
            lambda: store.rank("big"),
            lambda: store.boto3("big", stripe=RECORD),
        ),
    }
    try:
        import s3torchconnector  # noqa: F401  (not a requirement: measured where installed)
    except ImportError:
        print("s3torchconnector is not installed: its row is not measured", file=sys.stderr)
    else:
        cases["s3torchconnector 4 streams of whole 8 MiB objects / boto3 the same"] = (
            lambda: s3torchconnector_get_mb_s(store.env, store.staged["big"][1], STREAMS, SECONDS),
            lambda: store.boto3("big"),
        )
    return {name: compared(*readers) for name, readers in cases.items()}


def compared(mine: Callable[[], float], reference: Callable[[], float]) -> tuple[dict, float, float]:
    """runner.paired of the two readers, and each one's median MB/s over the pairs."""
    got: dict[str, list[float]] = {"mine": [], "reference": []}

    def kept(name: str, reader: Callable[[], float]) -> Callable[[], float]:
        def read() -> float:
            got[name].append(reader())
            return got[name][-1]

        return read

    p = paired(kept("mine", mine), kept("reference", reference), min_pairs=6, max_pairs=10)
    return p, statistics.median(got["mine"]), statistics.median(got["reference"])


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
