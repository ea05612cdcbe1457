"""One rank's measured training run: warm-up excluded, device-synced step times, per-epoch I/O."""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import torch

from bench import __version__
from bench.config import TrainConfig
from bench.errors import MeasurementError, StorageLost
from bench.loaders.base import Shard
from bench.loaders.registry import build_loader
from bench.metrics.io import cache_risk, dataset_epochs
from bench.metrics.registry import build_sources
from bench.metrics.sampler import Sampler
from bench.metrics.schema import RANK_FIELDS, SUMMARY_SCHEMA_VERSION, validate_summary
from bench.metrics.sources.pagecache import cache_domain, dataset_files, read_method, resident_bytes
from bench.models.registry import build
from bench.train.dist import Dist, init
from bench.train.slots import contention_summary
from bench.train.timing import StepTimer

LOSS_WINDOW = 3
MAX_EPOCHS = 1_000_000  # with --steps the epochs run until the steps (and min_measure_s) are done
MAX_EXTENSION_ROUNDS = 20  # each round adds 1.1x the missing time; a crawling rank cannot extend forever
MIN_BANDWIDTH_WINDOW_S = 5.0  # an epoch-1 read rate over a shorter window is start-up, not storage
EVICTION_LEFT_MAX = 0.02  # share of the dataset still resident after eviction that makes it "incomplete"


def _extension(dist: Dist, step_times: list[float], min_measure_s: float, round_: int) -> int:
    """Steps to add so every rank measures at least min_measure_s; the same answer on every rank.

    Decided from the slowest rank's measured time and mean step, agreed by allreduce, so all ranks
    stop at the same step. After MAX_EXTENSION_ROUNDS (a rank that slowed to a crawl) it gives up: the
    row is then INCONCLUSIVE for a short window, never silently short.
    """
    measured = sum(step_times)
    shortest = -dist.agree_max(-measured)
    slowest_step = dist.agree_max(statistics.fmean(step_times) if step_times else 1.0)
    if shortest >= min_measure_s or round_ >= MAX_EXTENSION_ROUNDS:
        return 0
    missing = min_measure_s - shortest
    return max(1, math.ceil(1.1 * missing / max(slowest_step, 1e-6)))


def _on_each_node(dist: Dist, data: Path | None, done: str, act) -> str:
    """`act(files)` on one rank per node, then the worst status of all nodes: `done`, "incomplete"
    (act returned False: more than EVICTION_LEFT_MAX of the dataset not where it should be) or
    "not_permitted" (an OSError)."""
    status = done
    if dist.local_rank == 0 and data is not None:
        try:
            if not act(dataset_files(data)):
                status = "incomplete"
        except OSError:
            status = "not_permitted"
    statuses = dist.allgather(status)
    for worst in ("not_permitted", "incomplete"):
        if worst in statuses:
            return worst
    return done


def _resident_share(files: list[tuple[Path, int]]) -> float | None:
    """Share of the dataset's bytes in the page cache now (None for an empty dataset)."""
    total = sum(size for _, size in files)
    if not total:
        return None
    method = read_method(files)
    return sum(resident_bytes(path, size, method) for path, size in files) / total


def drop_page_cache(dist: Dist, data: Path | None) -> str:
    """Evict the dataset's pages from this node's page cache before epoch 1 (one rank per node).

    Per file (POSIX_FADV_DONTNEED), not the global drop_caches: dropping everything also evicts the
    framework's shared libraries, whose page-ins during epoch 1 would then count as dataset reads.
    Dirty pages (a dataset generated or staged moments ago) cannot be dropped, so each file is synced
    first; what is still resident afterwards makes the eviction "incomplete", never silently "done".
    A storage server's own cache (NAS) is out of the client's reach: cache_served covers that.
    """

    def evict(files: list[tuple[Path, int]]) -> bool:
        for path, _ in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                with contextlib.suppress(OSError):  # read-only mounts; the residency check below decides
                    os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        share = _resident_share(files)
        return share is None or share <= EVICTION_LEFT_MAX

    # Every rank first ends what it reads before epoch 1 (its image check, its loader's build): a rank
    # still reading while its node is evicted left pages resident ("incomplete" on a default 2-rank run).
    dist.allgather("ready")
    return _on_each_node(dist, data, "done", evict)


def warm_page_cache(dist: Dist, data: Path | None) -> str:
    """Read every dataset file once before epoch 1 (one rank per node), so epoch 1 is served from the
    page cache: the differential rerun without storage. "warmed" only where all of it stayed resident."""

    def warm(files: list[tuple[Path, int]]) -> bool:
        for path, _ in files:
            with open(path, "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass
        share = _resident_share(files)
        return share is None or share >= 1 - EVICTION_LEFT_MAX

    return _on_each_node(dist, data, "warmed", warm)


def storage_lost(data: Path | None) -> str | None:
    """Why the dataset directory cannot be read now (ENOTCONN of a dead FUSE/NFS mount), or None."""
    if data is None:
        return None
    try:
        os.stat(data)
        next(os.scandir(data), None)
    except OSError as error:
        return error.strerror or str(error)
    return None


def bandwidth_note(first: dict | None, synthetic: bool, risk: bool, drop: str) -> str:
    """Why epoch 1's read rate is not a storage figure ("" where it is)."""
    if synthetic or first is None:
        return "no dataset read (synthetic data)"
    if drop == "warmed":
        return "warm-cache run: epoch 1 read the page cache on purpose"
    if first["cache_distorted"]:
        share = first["bytes_from_storage"] / first["bytes_consumed"] if first["bytes_consumed"] else 0.0
        return f"cache-distorted: storage served {share:.0%} of the bytes the loader consumed in epoch 1"
    if risk and drop != "done":
        return f"the dataset fits the nodes' page cache and its eviction was {drop.replace('_', ' ')}"
    if first["seconds"] < MIN_BANDWIDTH_WINDOW_S:
        return f"epoch-1 reads lasted {first['seconds']:.1f}s, under {MIN_BANDWIDTH_WINDOW_S:g}s: too short for a rate"
    return ""


def dataset_bytes(cfg: TrainConfig) -> int:
    if cfg.synthetic or cfg.data is None:
        return 0
    return sum(f.stat().st_size for f in cfg.data.rglob("*") if f.is_file())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _versions() -> dict[str, str]:
    out = {"bench": __version__, "torch": torch.__version__}
    for mod in ("horovod", "nvidia.dali"):
        try:
            out[mod] = __import__(mod, fromlist=["__version__"]).__version__
        except ImportError:
            out[mod] = "absent"
    return out


def _mean(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def train(cfg: TrainConfig) -> dict | None:
    """Run one rank; rank 0 returns (and writes) the run summary, other ranks return None."""
    dist = init(cfg.backend, cfg.bind)
    started = datetime.now(UTC).isoformat()
    torch.manual_seed(cfg.seed)
    built = build(cfg.workload, cfg.preset, cfg.image_size)
    model = built.model.to(dist.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr * dist.size, momentum=0.9)
    trained, optimizer = dist.wrap(model, optimizer)  # trained: the module forward runs through (DDP's)
    loader = build_loader(cfg, model, Shard(dist.rank, dist.size), dist.device)
    out = cfg.metrics_out
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    data = None if cfg.synthetic else cfg.data
    sources = build_sources(data, dist.device.index if dist.device.type == "cuda" else None, dist.local_rank == 0)
    sampler = Sampler(
        sources, cfg.sample_interval_s, out / f"samples-rank{dist.rank}.jsonl" if out else None, dist.rank
    )
    if cfg.warm_cache:
        drop = warm_page_cache(dist, cfg.data)
    else:
        drop = drop_page_cache(dist, cfg.data) if cfg.drop_caches else "not_requested"

    per_epoch = loader.steps_per_epoch
    if cfg.steps is not None:
        total_steps = cfg.warmup_steps + cfg.steps
        epochs = MAX_EPOCHS
    else:
        epochs = cfg.epochs or 1
        total_steps = epochs * per_epoch
    extensions = 0
    step_times: list[float] = []
    losses: list[float] = []
    epoch_marks: list[dict] = []
    step = 0
    timer = StepTimer(dist.device)
    sampler.start() if cfg.sampler else sampler.sample_now()
    scaler_ctx = torch.autocast(
        dist.device.type,
        dtype=torch.bfloat16 if dist.device.type == "cpu" else torch.float16,
        enabled=cfg.amp,
    )
    model.train()
    for epoch in range(1, epochs + 1):
        dist.barrier()
        sampler.phase = {"epoch": epoch, "phase": "train"}
        before = sampler.sample_now(settle=True)
        consumed_before = loader.stats.bytes_consumed
        images_before = loader.stats.samples
        ids_before = len(loader.stats.sample_ids)
        t_epoch = time.perf_counter()
        wall_start = time.time()
        t_prev = t_epoch
        batches = iter(loader.epoch())
        while True:
            timer.start(t_prev)
            try:
                batch = next(batches, None)
            except Exception as error:  # the loader's own error, unless the storage itself is gone
                lost = storage_lost(cfg.data)
                if lost is None:
                    raise
                raise StorageLost(
                    f"--data {cfg.data}: the dataset became unreachable in epoch {epoch} after {step} step(s) "
                    f"({lost}): the mount or storage server holding it went away"
                ) from error
            if batch is None:
                break
            timer.mark("data_wait")
            with scaler_ctx:
                loss = built.loss(trained, batch)
            optimizer.zero_grad()
            loss.backward()
            timer.mark("compute")
            optimizer.synchronize()  # the gradient allreduce's exposed part, timed on its own
            timer.mark("comm")
            with optimizer.skip_synchronize():
                optimizer.step()
            _sync(dist.device)
            loss_value = float(loss.detach())
            now = time.perf_counter()
            timer.finish(now, measured=step >= cfg.warmup_steps)
            if step >= cfg.warmup_steps:
                step_times.append(now - t_prev)
            losses.append(loss_value)
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"loss became {loss_value} at step {step}")
            t_prev = now
            step += 1
            if step == total_steps and cfg.steps is not None and cfg.min_measure_s > 0:
                total_steps += _extension(dist, step_times, cfg.min_measure_s, extensions)
                extensions += 1
            if step >= total_steps:
                break
        _sync(dist.device)
        seconds = time.perf_counter() - t_epoch
        dist.barrier()
        after = sampler.sample_now(settle=True)
        epoch_marks.append(
            {
                "epoch": epoch,
                "start": wall_start,
                "end": time.time(),
                "seconds": seconds,
                "images": (loader.stats.samples - images_before) if not cfg.synthetic else None,
                "consumed": loader.stats.bytes_consumed - consumed_before,
                "read_bytes": (after.get("read_bytes") or 0) - (before.get("read_bytes") or 0),
                "sample_ids": loader.stats.sample_ids[ids_before:],
            }
        )
        if step >= total_steps:
            break
    sampler.phase = {"epoch": epoch, "phase": "done"}
    sampler.stop()
    loader.close()

    measured = len(step_times)
    if measured == 0:
        raise MeasurementError(
            f"no measured step: the run ended after {step} step(s), all of them warm-up "
            f"(--warmup-steps {cfg.warmup_steps}); give more steps or fewer warm-up steps"
        )
    images_per_s = cfg.batch_size * measured / sum(step_times)
    rank_report = {
        "rank": dist.rank,
        "host": dist.host,
        "images": cfg.batch_size * measured,
        "images_per_s": images_per_s,
        "step_time_median_s": statistics.median(step_times) if step_times else 0.0,
        "bytes_from_storage": float(sum(m["read_bytes"] for m in epoch_marks)),
        "bytes_consumed": float(loader.stats.bytes_consumed),
        "samples_read": loader.stats.samples,
        "ram_bytes": psutil.virtual_memory().total,
        "epoch_marks": epoch_marks,
        "samples": sampler.samples,
        "steps_measured": measured,
        "measured_s": float(sum(step_times)),
        "step_times_s": [round(t, 6) for t in step_times],
        "slot": dist.slot,
        "cache_domain": cache_domain(data) if data is not None else None,
        "node_sampler": dist.local_rank == 0,
        "pagecache_method": next((x.method for x in sources if x.name == "pagecache"), None),
        "breakdown": {
            **timer.summary(skip_first=cfg.warmup_steps == 0),
            "slot_cpu_util": _mean([x.get("slot_cpu_util") for x in sampler.samples if x.get("phase") == "train"]),
        },
        "losses": losses,
    }
    shard = {"rank": dist.rank, "epochs": [m.pop("sample_ids") for m in epoch_marks]}  # not gathered
    if out is not None:
        (out / f"shard-rank{dist.rank}.json").write_text(json.dumps(shard))
    reports = dist.allgather(rank_report)
    if dist.rank != 0:
        return None
    summary = _summarise(cfg, dist, reports, drop, started)
    validate_summary(summary)
    if out is not None:
        tmp = out / ".summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, out / "summary.json")
    return summary


def _summarise(cfg: TrainConfig, dist: Dist, reports: list[dict], drop: str, started: str) -> dict:
    window = max(cfg.sample_interval_s, 1e-3)
    epochs, bytes_source, by_source = dataset_epochs(reports, window)
    hosts = sorted({r["host"] for r in reports})
    ram_per_host = {r["host"]: r["ram_bytes"] for r in reports}
    ds_bytes = dataset_bytes(cfg)
    aggregate_ram = int(sum(ram_per_host.values()))
    risk = cache_risk(ds_bytes, aggregate_ram) if ds_bytes else False
    first = epochs[0] if epochs else None
    note = bandwidth_note(first, cfg.synthetic, risk, drop)
    bandwidth_valid = first is not None and not cfg.synthetic and note == ""
    samples = [s for r in reports for s in r["samples"] if s.get("phase") == "train"]
    loss_n = min(LOSS_WINDOW, max(1, len(reports[0]["losses"]) // 2))
    all_losses = [r["losses"] for r in reports]
    per_rank = [{k: r[k] for k in RANK_FIELDS} for r in reports]
    gpu_mem = [s.get("gpu_mem_used_bytes") for s in samples if s.get("gpu_mem_used_bytes") is not None]
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "valid": True,
        "status": "success",
        "workload": cfg.workload,
        "preset": cfg.preset,
        "loader": "synthetic" if cfg.synthetic else cfg.loader,
        "synthetic": cfg.synthetic,
        "ranks": dist.size,
        "backend": dist.backend,
        # Ranks that shared cores or a GPU they were not told to share: every figure is INCONCLUSIVE.
        "contention": contention_summary([r["slot"] for r in reports]),
        "hosts": hosts,
        "device": dist.device.type,
        "batch_size": cfg.batch_size,
        "image_size": cfg.image_size,
        "measured_steps": min(r["steps_measured"] for r in reports),
        # The shortest rank's measured window (warm-up excluded): what min_measure_s is compared with.
        "measured_s": float(min(r["measured_s"] for r in reports)),
        "min_measure_s": cfg.min_measure_s,
        # The measured sum over ranks, never N x one rank.
        "images_per_s": float(sum(r["images_per_s"] for r in reports)),
        "images_per_s_per_rank": [float(r["images_per_s"]) for r in reports],
        "epoch_time_s": float(statistics.median(e["seconds"] for e in epochs)),
        "first_epoch_time_s": float(epochs[0]["seconds"]),
        "epochs": epochs,
        "per_rank": per_rank,
        "utilisation": {
            "cpu_util": _mean([s.get("cpu_util") for s in samples]),
            "slot_cpu_util": _mean([s.get("slot_cpu_util") for s in samples]),
            "mem_util": _mean([s.get("mem_util") for s in samples]),
            "gpu_util": _mean([s.get("gpu_util") for s in samples]),
            "gpu_mem_util": _mean([s.get("gpu_mem_util") for s in samples]),
            "gpu_mem_peak_bytes": max(gpu_mem) if gpu_mem else None,
        },
        "storage": {
            "dataset_bytes": ds_bytes,
            "aggregate_ram_bytes": aggregate_ram,
            "cache_risk": risk,
            "drop_caches": drop,
            "first_epoch_avg_read_mb_s": None if cfg.synthetic else first["avg_read_mb_s"],
            "first_epoch_peak_read_mb_s": None if cfg.synthetic else first["peak_read_mb_s"],
            "bandwidth_valid": bandwidth_valid,
            "bandwidth_note": note,
            "bytes_source": None if cfg.synthetic else bytes_source,
            "first_epoch_bytes_by_source": by_source,
        },
        "loss_first": float(statistics.fmean(x for ls in all_losses for x in ls[:loss_n])),
        "loss_last": float(statistics.fmean(x for ls in all_losses for x in ls[-loss_n:])),
        "versions": _versions(),
        "run_nonce": cfg.run_nonce,
        "started_at": started,
        "ended_at": datetime.now(UTC).isoformat(),
    }
