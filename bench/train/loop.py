"""One rank's measured training run: warm-up excluded, device-synced step times, per-epoch I/O."""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
from datetime import UTC, datetime

import psutil
import torch

from bench.config.models import TrainConfig
from bench.data.location import is_s3
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
from bench.models.registry import WorkloadModel, build
from bench.safe_fs import write_file
from bench.train.dist import Dist, init
from bench.train.dist.allreduce_probe import gradient_bytes, probe_allreduce
from bench.train.dist.ring import probe_ring
from bench.train.precision import compiled, make_optimizer, prepare_model, setup
from bench.train.timing import GpuBusyWindow, StepTimer, busy_window, window_steps
from bench.workloads.emulate import Accelerator, EmulatedModel

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


class _Rank:
    """What one rank trains with, set up once: the model, its step, the loader and the samplers."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.dist = dist = init(cfg.backend, cfg.bind)
        self.started = datetime.now(UTC).isoformat()
        torch.manual_seed(cfg.seed)
        # An emulated rank (bench.workloads.emulate) waits the accelerator's time instead of computing
        self.emulator = Accelerator(cfg.accelerator_s) if cfg.accelerator_s is not None else None
        if self.emulator is not None:
            # one intra-op thread: its tiny backward needs no pool, and a pool's threads spin after each
            # parallel region on the cores the reader's workers need
            torch.set_num_threads(1)
            self.built = WorkloadModel(EmulatedModel(cfg.gradient_bytes), self.emulator.loss, conv=False)
        else:
            self.built = build(cfg.workload, cfg.preset, cfg.image_size)
        # Horovod allreduces only contiguous gradients: channels_last weights need a backend that takes
        # strided ones (torch DDP).
        self.tuned = setup(cfg, dist.device, self.built.conv, dense_gradients=dist.backend == "horovod")
        self.model = prepare_model(self.built.model, self.tuned)
        optimizer = make_optimizer(self.model.parameters(), cfg.lr * dist.size, dist.device)
        # Independent copies (the node-ceiling run) train alone: no gradient collective, no exposed wait.
        self.collective = not cfg.independent
        # trained: the module the step's forward runs through (DDP's wrapper); the loader reads the model's own
        trained, self.optimizer = dist.wrap(self.model, optimizer) if self.collective else (self.model, optimizer)
        self.loader = build_loader(cfg, self.model, Shard(dist.rank, dist.size), dist.device)
        self.step_model = compiled(trained, self.tuned.compile)
        self.warmup = cfg.warmup_steps + self.tuned.warmup_extra  # compiling happens in the first calls, never measured
        self.out = out = cfg.metrics_out
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        # the dataset's folder; None on synthetic data and over S3 (no page cache, device or mount of it here)
        self.data = None if cfg.synthetic or is_s3(cfg.data) else cfg.data
        gpu = dist.device.index if dist.device.type == "cuda" else None
        received = getattr(self.loader, "received", None)
        self.sources = build_sources(self.data, gpu, dist.local_rank == 0, s3_received=received)
        self.sampler = Sampler(
            self.sources, cfg.sample_interval_s, out / f"samples-rank{dist.rank}.jsonl" if out else None, dist.rank
        )
        if cfg.warm_cache:
            self.drop = warm_page_cache(dist, cfg.data)
        elif is_s3(cfg.data):  # over S3 nothing of the dataset sits in this node's page cache
            self.drop = "not_requested"
        else:
            self.drop = drop_page_cache(dist, cfg.data) if cfg.drop_caches else "not_requested"
        self.stall = None  # saves during the measured steps (bench.train.checkpointing), when asked for
        if cfg.checkpoint_every_steps:
            from bench.train.checkpointing import stall_of

            self.stall = stall_of(cfg, dist, self.model, self.optimizer)

    def train_step(self, batch: dict[str, torch.Tensor], mark) -> torch.Tensor:
        """One step: forward under autocast, backward (scaled under fp16), the gradient sync's exposed
        part on its own, then the optimizer step. `mark` ends each phase (the step timer's)."""
        tuned, optimizer = self.tuned, self.optimizer
        with tuned.autocast():
            loss = self.built.loss(self.step_model, batch)
        optimizer.zero_grad()  # set_to_none, torch's default
        tuned.backward(loss)
        if self.emulator is not None:
            self.emulator.finish()  # the rest of the accelerator's time per batch, a timed wait
        mark("compute")
        if self.collective:
            optimizer.synchronize()  # the gradient allreduce's exposed part, timed on its own
        mark("comm")
        with optimizer.skip_synchronize() if self.collective else contextlib.nullcontext():
            tuned.step(optimizer)
        return loss


class _Progress:
    """Where the run stands: steps taken and planned, measured step times, losses and each epoch's marks."""

    def __init__(self, cfg: TrainConfig, rank: _Rank) -> None:
        per_epoch = rank.loader.steps_per_epoch
        if cfg.steps is not None:
            self.total_steps = rank.warmup + cfg.steps
            self.epochs = MAX_EPOCHS
        else:
            self.epochs = cfg.epochs or 1
            self.total_steps = self.epochs * per_epoch
        self.extensions = 0
        self.step_times: list[float] = []
        self.losses: list[float] = []
        self.epoch_marks: list[dict] = []
        self.step = 0
        # The loader's consumed bytes when the first measured step began: epoch 1's read rate is taken
        # over the measured steps, as the throughput is (bench.metrics.io.epoch_io; issue 62)
        self.consumed_at_measure: int | None = None
        self.images_at_measure: int | None = None
        self.shapes: dict[str, tuple[int, ...]] | None = None
        self.timer = StepTimer(rank.dist.device)
        # GPU kernel time over a few measured steps (CUPTI); on a CPU node nothing runs and the figure is null
        self.busy = GpuBusyWindow(
            rank.dist.device, busy_window(rank.warmup, self.total_steps - rank.warmup, window_steps())
        )

    @property
    def done(self) -> bool:
        return self.step >= self.total_steps


def train(cfg: TrainConfig) -> dict | None:
    """Run one rank; rank 0 returns (and writes) the run summary, other ranks return None."""
    rank = _Rank(cfg)
    progress = _Progress(cfg, rank)
    sampler = rank.sampler
    sampler.start() if cfg.sampler else sampler.sample_now()
    rank.model.train()
    try:
        for epoch in range(1, progress.epochs + 1):
            _run_epoch(cfg, rank, progress, epoch)
            if progress.done:
                break
    finally:
        if rank.stall is not None:  # a failing rank still removes its save folder from the store
            rank.stall.close()
    sampler.phase = {"epoch": epoch, "phase": "done"}
    sampler.stop()
    rank.loader.close()
    if not progress.step_times:
        extra = f" + {rank.tuned.warmup_extra} to compile" if rank.tuned.warmup_extra else ""
        raise MeasurementError(
            f"no measured step: the run ended after {progress.step} step(s), all of them warm-up "
            f"(--warmup-steps {cfg.warmup_steps}{extra}); give more steps or fewer warm-up steps"
        )
    report = _rank_report(cfg, rank, progress)
    if cfg.checkpoint is not None or rank.stall is not None:
        report["checkpoint"] = _checkpoints(cfg, rank, report["measured_s"])
    return _gather_summary(cfg, rank, report, progress.epoch_marks)


def _checkpoints(cfg: TrainConfig, rank: _Rank, measured_s: float) -> dict:
    """This rank's checkpoint figures: the stall of its saves, then the checkpoint phase on every rank."""
    from bench.train.checkpointing import phase

    out: dict = {"stall": None, "phase": None}
    if rank.stall is not None:
        out["stall"] = rank.stall.report(measured_s)
    if cfg.checkpoint is not None:
        out["phase"] = phase(cfg, rank.dist, rank.model, rank.optimizer)
    return out


def _run_epoch(cfg: TrainConfig, rank: _Rank, progress: _Progress, epoch: int) -> None:
    """One epoch's steps (until the epoch or the planned steps end), then its mark: seconds, images,
    bytes consumed and read from storage, and the sample ids it read."""
    dist, loader, sampler = rank.dist, rank.loader, rank.sampler
    dist.barrier()
    sampler.phase = {"epoch": epoch, "phase": "train"}
    before = sampler.sample_now(settle=True)
    consumed_before = loader.stats.bytes_consumed
    images_before = loader.stats.samples
    ids_before = len(loader.stats.sample_ids)
    t_epoch = time.perf_counter()
    wall_start = time.time()
    measured_before = len(progress.step_times)
    _run_steps(cfg, rank, progress, epoch, t_epoch)
    _sync(dist.device)
    seconds = time.perf_counter() - t_epoch
    dist.barrier()
    after = sampler.sample_now(settle=True)
    progress.epoch_marks.append(
        {
            "epoch": epoch,
            "start": wall_start,
            "end": time.time(),
            "seconds": seconds,
            "images": (loader.stats.samples - images_before) if not cfg.synthetic else None,
            "consumed": loader.stats.bytes_consumed - consumed_before,
            "read_bytes": (after.get("read_bytes") or 0) - (before.get("read_bytes") or 0),
            # the epoch's measured steps: their seconds, the bytes and images the loader handed them
            "measured_s": sum(progress.step_times[measured_before:]),
            "measured_consumed": _since_measure(
                loader.stats.bytes_consumed, consumed_before, progress.consumed_at_measure
            ),
            "measured_images": _since_measure(loader.stats.samples, images_before, progress.images_at_measure),
            "sample_ids": loader.stats.sample_ids[ids_before:],
        }
    )


def _since_measure(now: int, epoch_start: int, at_measure: int | None) -> int:
    """A loader count (bytes or images) handed to the epoch's measured steps: since the epoch began, or
    since the first measured step where the warm-up ended inside it (0 where it did not end)."""
    if at_measure is None:
        return 0
    return now - max(at_measure, epoch_start)


def _next_batch(cfg: TrainConfig, batches, epoch: int, step: int):
    """The loader's next batch (None at the epoch's end); a loader error with the storage gone is StorageLost."""
    try:
        return next(batches, None)
    except Exception as error:  # the loader's own error, unless the storage itself is gone
        lost = None if is_s3(cfg.data) else storage_lost(cfg.data)
        if lost is None:
            raise
        raise StorageLost(
            f"--data {cfg.data}: the dataset became unreachable in epoch {epoch} after {step} step(s) "
            f"({lost}): the mount or storage server holding it went away"
        ) from error


def _run_steps(cfg: TrainConfig, rank: _Rank, progress: _Progress, epoch: int, t_prev: float) -> None:
    """The epoch's timed steps: warm-up ones unmeasured, each measured one device-synced; with --steps
    and min_measure_s the planned steps are extended until every rank has measured long enough."""
    dist, tuned, timer, busy, p = rank.dist, rank.tuned, progress.timer, progress.busy, progress
    batches = iter(rank.loader.epoch())
    while True:
        if busy.begin(p.step):  # the profiler started: every rank meets, then the step's clock starts
            dist.barrier()
            t_prev = time.perf_counter()
        timer.start(t_prev)
        if p.step == rank.warmup and p.consumed_at_measure is None:
            p.consumed_at_measure = rank.loader.stats.bytes_consumed
            p.images_at_measure = rank.loader.stats.samples
        batch = _next_batch(cfg, batches, epoch, p.step)
        if batch is None:
            break
        batch = tuned.layout(batch)
        if tuned.compile == "cuda_graphs":
            p.shapes = _same_shapes(p.shapes, batch, p.step)
        timer.mark("data_wait")
        loss = rank.train_step(batch, timer.mark)
        _sync(dist.device)
        loss_value = float(loss.detach())
        now = time.perf_counter()
        timer.finish(now, measured=p.step >= rank.warmup)
        if p.step >= rank.warmup:
            p.step_times.append(now - t_prev)
        if busy.end(p.step, now - t_prev):  # the profiler stopped and was read: not the next step's time
            dist.barrier()
            now = time.perf_counter()
        if rank.stall is not None and p.step >= rank.warmup and rank.stall.due(len(p.step_times)):
            now = rank.stall.save()  # kept out of the step times: its share is reported on its own
        p.losses.append(loss_value)
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss became {loss_value} at step {p.step}")
        t_prev = now
        p.step += 1
        if p.step == p.total_steps and cfg.steps is not None and cfg.min_measure_s > 0:
            p.total_steps += _extension(dist, p.step_times, cfg.min_measure_s, p.extensions)
            p.extensions += 1
        if p.done:
            break


def _rank_report(cfg: TrainConfig, rank: _Rank, progress: _Progress) -> dict:
    """This rank's figures for the summary: images/s, step times, GPU busy share, bytes, samples, the
    step breakdown, the allreduce probe and (on a node's first rank) the node's fingerprint."""
    dist, tuned, loader, sampler, data = rank.dist, rank.tuned, rank.loader, rank.sampler, rank.data
    step_times, epoch_marks = progress.step_times, progress.epoch_marks
    measured = len(step_times)
    gpu_busy = progress.busy.close(step_times)
    # The scale's network ceiling, on its own ranks and process group, right after its measured steps
    allreduce = probe_allreduce(dist, gradient_bytes(rank.model)) if rank.collective else None
    # Each node's link, on the same slots, right after: a few seconds of point-to-point between nodes
    ring = probe_ring(dist) if rank.collective else None
    training = [x for x in sampler.samples if x.get("phase") == "train"]
    return {
        "rank": dist.rank,
        "host": dist.host,
        "images": cfg.batch_size * measured,
        "images_per_s": cfg.batch_size * measured / sum(step_times),
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
        "dataset_bytes": getattr(loader, "dataset_bytes", None),  # over S3: the staged objects' bytes
        # over S3: every byte this rank's GETs received, its workers stopped (loader.close): the server's count
        "s3_received_bytes": int(loader.received.value) if getattr(loader, "received", None) is not None else None,
        # and the GET tries that failed and were retried (a store dropping connections: bench.loaders.s3_get)
        "s3_get_errors": int(loader.get_errors.value) if getattr(loader, "get_errors", None) is not None else None,
        "node_sampler": dist.local_rank == 0,
        "pagecache_method": next((x.method for x in rank.sources if x.name == "pagecache"), None),
        "breakdown": {
            **progress.timer.summary(skip_first=rank.warmup == 0),
            "slot_cpu_util": mean([x.get("slot_cpu_util") for x in training]),
            **interference_of(training),
        },
        "precision": tuned.precision,
        "accelerator_wait_median_s": (
            statistics.median(rank.emulator.waits[rank.warmup :] or rank.emulator.waits) if rank.emulator else None
        ),
        "allreduce": allreduce,
        "ring": ring,
        "losses": progress.losses,
        # what this node runs (driver, CUDA, NCCL, kernel, mount, ...): read once per node, by its first rank
        "node_fingerprint": node_fingerprint(dist.host, None if cfg.synthetic else cfg.data)
        if dist.local_rank == 0
        else None,
    }


def _gather_summary(cfg: TrainConfig, rank: _Rank, report: dict, epoch_marks: list[dict]) -> dict | None:
    """Write this rank's shard (the sample ids each epoch read), gather every rank's report, close the
    process group; rank 0 then validates, writes and returns the run summary."""
    dist, out = rank.dist, rank.out
    shard = {"rank": dist.rank, "epochs": [m.pop("sample_ids") for m in epoch_marks]}  # not gathered
    if out is not None:
        write_file(out / f"shard-rank{dist.rank}.json", json.dumps(shard))
    reports = dist.allgather(report)
    dist.close()  # the last collective: a process group left to the interpreter's exit can abort it
    if dist.rank != 0:
        return None
    checkpoints = [r.pop("checkpoint", None) for r in reports]
    summary = summarise(cfg, dist, reports, rank.drop, rank.started)
    if any(checkpoints):
        from bench.train.checkpointing import summary_block

        summary["checkpoint"] = summary_block(cfg, [c or {} for c in checkpoints])
    validate_summary(summary)
    if out is not None:
        write_file(out / "summary.json", json.dumps(summary, indent=2))
    return summary
