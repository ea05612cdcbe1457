"""One rank's measured training run: warm-up excluded, device-synced step times, per-epoch I/O."""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import time
from datetime import UTC, datetime

import psutil
import torch

from bench.config import TrainConfig
from bench.data.pagecache import drop_page_cache, storage_lost, warm_page_cache
from bench.env.fingerprint import node_fingerprint
from bench.errors import ConfigError, MeasurementError, StorageLost
from bench.loaders.base import Shard
from bench.loaders.registry import build_loader
from bench.metrics.registry import build_sources
from bench.metrics.sampler import Sampler
from bench.metrics.schema import validate_summary
from bench.metrics.sources.pagecache import cache_domain
from bench.metrics.summary import interference_of, mean, summarise
from bench.models.registry import build
from bench.train.dist import Dist, init
from bench.train.dist.probe import gradient_bytes, probe_allreduce
from bench.train.precision import compiled, make_optimizer, prepare_model, setup
from bench.train.timing import GpuBusyWindow, StepTimer, busy_window, window_steps

MAX_EPOCHS = 1_000_000  # with --steps the epochs run until the steps (and min_measure_s) are done
MAX_EXTENSION_ROUNDS = 20  # each round adds 1.1x the missing time; a crawling rank cannot extend forever


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _same_shapes(
    shapes: dict[str, tuple[int, ...]] | None, batch: dict[str, torch.Tensor], step: int
) -> dict[str, tuple[int, ...]]:
    """CUDA graphs replay fixed buffers: a batch whose shapes differ from the first is refused."""
    now = {k: tuple(v.shape) for k, v in batch.items()}
    if shapes is not None and now != shapes:
        raise ConfigError(
            f"compile: cuda_graphs needs fixed batch shapes; at step {step} the loader gave {now}, "
            f"the graphs were recorded for {shapes}; use none or torch_compile"
        )
    return now


def train(cfg: TrainConfig) -> dict | None:
    """Run one rank; rank 0 returns (and writes) the run summary, other ranks return None."""
    dist = init(cfg.backend, cfg.bind)
    started = datetime.now(UTC).isoformat()
    torch.manual_seed(cfg.seed)
    built = build(cfg.workload, cfg.preset, cfg.image_size)
    # Horovod allreduces only contiguous gradients: channels_last weights need a backend that takes
    # strided ones (torch DDP).
    tuned = setup(cfg, dist.device, built.conv, dense_gradients=dist.backend == "horovod")
    model = prepare_model(built.model, tuned)
    optimizer = make_optimizer(model.parameters(), cfg.lr * dist.size, dist.device)
    # Independent copies (the node-ceiling run) train alone: no gradient collective, no exposed wait.
    collective = not cfg.independent
    # trained: the module the step's forward runs through (DDP's wrapper); the loader reads the model's own
    trained, optimizer = dist.wrap(model, optimizer) if collective else (model, optimizer)
    loader = build_loader(cfg, model, Shard(dist.rank, dist.size), dist.device)
    step_model = compiled(trained, tuned.compile)
    warmup = cfg.warmup_steps + tuned.warmup_extra  # compiling happens in the first calls, never measured
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
        total_steps = warmup + cfg.steps
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
    # GPU kernel time over a few measured steps (CUPTI); on a CPU node nothing runs and the figure is null
    busy = GpuBusyWindow(dist.device, busy_window(warmup, total_steps - warmup, window_steps()))
    sampler.start() if cfg.sampler else sampler.sample_now()
    shapes: dict[str, tuple[int, ...]] | None = None

    def train_step(batch: dict[str, torch.Tensor], mark) -> torch.Tensor:
        """One step: forward under autocast, backward (scaled under fp16), the gradient sync's exposed
        part on its own, then the optimizer step. `mark` ends each phase (the step timer's)."""
        with tuned.autocast():
            loss = built.loss(step_model, batch)
        optimizer.zero_grad()  # set_to_none, torch's default
        tuned.backward(loss)
        mark("compute")
        if collective:
            optimizer.synchronize()  # the gradient allreduce's exposed part, timed on its own
        mark("comm")
        with optimizer.skip_synchronize() if collective else contextlib.nullcontext():
            tuned.step(optimizer)
        return loss

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
            if busy.begin(step):  # the profiler started: every rank meets, then the step's clock starts
                dist.barrier()
                t_prev = time.perf_counter()
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
            batch = tuned.layout(batch)
            if tuned.compile == "cuda_graphs":
                shapes = _same_shapes(shapes, batch, step)
            timer.mark("data_wait")
            loss = train_step(batch, timer.mark)
            _sync(dist.device)
            loss_value = float(loss.detach())
            now = time.perf_counter()
            timer.finish(now, measured=step >= warmup)
            if step >= warmup:
                step_times.append(now - t_prev)
            if busy.end(step, now - t_prev):  # the profiler stopped and was read: not the next step's time
                dist.barrier()
                now = time.perf_counter()
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
        extra = f" + {tuned.warmup_extra} to compile" if tuned.warmup_extra else ""
        raise MeasurementError(
            f"no measured step: the run ended after {step} step(s), all of them warm-up "
            f"(--warmup-steps {cfg.warmup_steps}{extra}); give more steps or fewer warm-up steps"
        )
    gpu_busy = busy.close(step_times)
    # The scale's network ceiling, on its own ranks and process group, right after its measured steps
    allreduce = probe_allreduce(dist, gradient_bytes(model)) if collective else None
    images_per_s = cfg.batch_size * measured / sum(step_times)
    rank_report = {
        "rank": dist.rank,
        "host": dist.host,
        "images": cfg.batch_size * measured,
        "images_per_s": images_per_s,
        "step_time_median_s": statistics.median(step_times) if step_times else 0.0,
        "gpu_busy_s": gpu_busy.busy_s,
        "gpu_busy_share": gpu_busy.share,
        "gpu_busy_note": gpu_busy.note,
        "scaler_skipped_steps": tuned.skipped_steps if tuned.scaler is not None else None,
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
            **timer.summary(skip_first=warmup == 0),
            "slot_cpu_util": mean([x.get("slot_cpu_util") for x in sampler.samples if x.get("phase") == "train"]),
            **interference_of([x for x in sampler.samples if x.get("phase") == "train"]),
        },
        "precision": tuned.precision,
        "allreduce": allreduce,
        "losses": losses,
        # what this node runs (driver, CUDA, NCCL, kernel, mount, ...): read once per node, by its first rank
        "node_fingerprint": node_fingerprint(dist.host, data) if dist.local_rank == 0 else None,
    }
    shard = {"rank": dist.rank, "epochs": [m.pop("sample_ids") for m in epoch_marks]}  # not gathered
    if out is not None:
        (out / f"shard-rank{dist.rank}.json").write_text(json.dumps(shard))
    reports = dist.allgather(rank_report)
    dist.close()  # the last collective: a process group left to the interpreter's exit can abort it
    if dist.rank != 0:
        return None
    summary = summarise(cfg, dist, reports, drop, started)
    validate_summary(summary)
    if out is not None:
        tmp = out / ".summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, out / "summary.json")
    return summary
