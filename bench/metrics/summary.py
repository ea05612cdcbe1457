"""A run's summary from its ranks' reports: epochs, throughput, utilisation, storage figures, the
environment, written beside its schema (bench.metrics.schema). Rank 0 assembles it after the loop."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime

import torch

from bench import __version__
from bench.collective import Collective
from bench.config.models import TrainConfig
from bench.data.location import is_s3
from bench.metrics.io import cache_risk, dataset_epochs
from bench.metrics.schema import RANK_FIELDS, RANK_GPU_FIELDS, SUMMARY_SCHEMA_VERSION
from bench.slots import contention_summary

LOSS_WINDOW = 3
MIN_BANDWIDTH_WINDOW_S = 5.0  # an epoch-1 read rate over a shorter window is start-up, not storage


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


def dataset_bytes(cfg: TrainConfig, reports: list[dict] | None = None) -> int:
    """The dataset's bytes: its folder's files, or over S3 the staged objects' (the loader's count)."""
    if cfg.synthetic or cfg.data is None:
        return 0
    if is_s3(cfg.data):
        return int(next((r["dataset_bytes"] for r in reports or [] if r.get("dataset_bytes") is not None), 0))
    return sum(f.stat().st_size for f in cfg.data.rglob("*") if f.is_file())


def _versions() -> dict[str, str]:
    out = {"bench": __version__, "torch": torch.__version__}
    for mod in ("horovod", "nvidia.dali"):
        try:
            out[mod] = __import__(mod, fromlist=["__version__"]).__version__
        except ImportError:
            out[mod] = "absent"
    return out


def interference_of(samples: list[dict]) -> dict:
    """Foreign work on this rank's cores while it trained: the mean share and the neighbour seen most."""
    from collections import Counter

    tops = Counter(x["foreign_top"].split(",")[0] for x in samples if x.get("foreign_top"))
    return {
        "foreign_cpu_share": mean([x.get("foreign_cpu_share") for x in samples]),
        "foreign_top": tops.most_common(1)[0][0] if tops else None,
    }


def _mean_all(values: list[float | None]) -> float | None:
    """The mean only where every rank has a figure: a partial mean would stand for ranks it lacks."""
    return statistics.fmean(values) if values and all(v is not None for v in values) else None  # type: ignore[arg-type]


def busy_note(reports: list[dict]) -> str | None:
    """Why the run's GPU busy share is null: the ranks' reason where they agree ("no GPU" on a CPU node),
    else each rank's that has one; None where every rank has a figure."""
    notes = {r["rank"]: r.get("gpu_busy_note") for r in reports if r.get("gpu_busy_share") is None}
    if not notes:
        return None
    reasons = {n or "no figure" for n in notes.values()}
    if len(reasons) == 1 and len(notes) == len(reports):
        return reasons.pop()
    return "; ".join(f"rank {rank}: {note or 'no figure'}" for rank, note in sorted(notes.items()))


def _max_or_none(values: list[int | None]) -> int | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def mean(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def summarise(cfg: TrainConfig, dist: Collective, reports: list[dict], drop: str, started: str) -> dict:
    """The run's summary (SUMMARY_SCHEMA_VERSION, docs/schemas.md) from every rank's report, in rank order."""
    epochs, bytes_source, by_source = dataset_epochs(reports, max(cfg.sample_interval_s, 1e-3))
    samples = [s for r in reports for s in r["samples"] if s.get("phase") == "train"]
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "valid": True,
        "status": "success",
        **_setup(cfg, dist, reports),
        **_measured(cfg, reports, epochs),
        "epochs": epochs,
        "per_rank": [{k: r[k] for k in (*RANK_FIELDS, *RANK_GPU_FIELDS)} for r in reports],
        "utilisation": _utilisation(reports, samples),
        "storage": _storage(cfg, reports, epochs[0] if epochs else None, drop, bytes_source, by_source),
        "nodes": node_figures(cfg, reports),
        **_losses(reports),
        "versions": _versions(),
        "environment": [r["node_fingerprint"] for r in reports if r.get("node_fingerprint")],
        "run_nonce": cfg.run_nonce,
        "started_at": started,
        "ended_at": datetime.now(UTC).isoformat(),
    }


def _setup(cfg: TrainConfig, dist: Collective, reports: list[dict]) -> dict:
    """What ran, and where: the workload and its options, the ranks, how they met and what they shared."""
    return {
        "workload": cfg.workload,
        "emulated": cfg.accelerator_s is not None,
        "accelerator": cfg.accelerator,
        "accelerator_s": cfg.accelerator_s,
        # the emulated accelerator's wait per batch, the slowest rank's median (null when real)
        "accelerator_wait_median_s": _max_or_none([r.get("accelerator_wait_median_s") for r in reports]),
        "preset": cfg.preset,
        "loader": "synthetic" if cfg.synthetic else cfg.loader,
        "synthetic": cfg.synthetic,
        "independent": cfg.independent,
        "ranks": dist.size,
        "backend": dist.backend,
        "rendezvous": dist.rendezvous,  # where the ranks met: {host, port, interface}; null for one rank
        # Ranks that shared cores or a GPU they were not told to share: every figure is INCONCLUSIVE.
        "contention": contention_summary([r["slot"] for r in reports]),
        "hosts": sorted({r["host"] for r in reports}),
        "device": dist.device.type,
        "precision": reports[0]["precision"],
        "compile": cfg.compile,
    }


def _measured(cfg: TrainConfig, reports: list[dict], epochs: list[dict]) -> dict:
    """The measured window and its rates: steps, seconds, images/s (summed over ranks) and epoch times."""
    return {
        # Steps the fp16 GradScaler skipped (inf/NaN gradients; warm-up included): null without a scaler.
        "scaler_skipped_steps": _max_or_none([r["scaler_skipped_steps"] for r in reports]),
        # The scale's allreduce probe (bench.train.dist.allreduce_probe): null on one rank and on independent copies.
        "allreduce": reports[0].get("allreduce"),
        # The ring test between the scale's nodes (bench.train.dist.ring): null on one node.
        "ring": reports[0].get("ring"),
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
    }


def _utilisation(reports: list[dict], samples: list[dict]) -> dict:
    """Means of the ranks' training-phase samples, the GPU busy share and the GPU memory peak."""
    gpu_mem = [s.get("gpu_mem_used_bytes") for s in samples if s.get("gpu_mem_used_bytes") is not None]
    return {
        "cpu_util": mean([s.get("cpu_util") for s in samples]),
        "slot_cpu_util": mean([s.get("slot_cpu_util") for s in samples]),
        "mem_util": mean([s.get("mem_util") for s in samples]),
        "gpu_util": mean([s.get("gpu_util") for s in samples]),
        # GPU kernel time over the wall time of a profiled window of measured steps
        # (timing.GpuBusyWindow), mean over ranks; null with the reason on a CPU node ("no GPU") or
        # where a rank's profiler gave no figure.
        "gpu_busy_share": _mean_all([r["gpu_busy_share"] for r in reports]),
        "gpu_busy_note": busy_note(reports),
        "gpu_mem_util": mean([s.get("gpu_mem_util") for s in samples]),
        "gpu_mem_peak_bytes": max(gpu_mem) if gpu_mem else None,
    }


def _storage(
    cfg: TrainConfig, reports: list[dict], first: dict | None, drop: str, bytes_source: str, by_source: dict[str, float]
) -> dict:
    """Epoch 1's read rates from storage, and whether they are a storage figure at all (the dataset
    against the nodes' RAM, the page cache's preparation `drop`, the window's length)."""
    ds_bytes = dataset_bytes(cfg, reports)
    aggregate_ram = int(sum({r["host"]: r["ram_bytes"] for r in reports}.values()))  # once per host
    # over S3 no byte passes the nodes' page cache: every one a rank consumed came over the wire
    risk = cache_risk(ds_bytes, aggregate_ram) if ds_bytes and bytes_source != "s3" else False
    note = bandwidth_note(first, cfg.synthetic, risk, drop)
    received = [r["s3_received_bytes"] for r in reports if r.get("s3_received_bytes") is not None]
    errors = [r["s3_get_errors"] for r in reports if r.get("s3_get_errors") is not None]
    return {
        **({"s3_received_bytes": int(sum(received))} if received else {}),
        **({"s3_get_errors": int(sum(errors))} if errors else {}),
        "dataset_bytes": ds_bytes,
        "aggregate_ram_bytes": aggregate_ram,
        "cache_risk": risk,
        "drop_caches": drop,
        "first_epoch_avg_read_mb_s": None if cfg.synthetic else first["avg_read_mb_s"],
        "first_epoch_peak_read_mb_s": None if cfg.synthetic else first["peak_read_mb_s"],
        "bandwidth_valid": first is not None and not cfg.synthetic and note == "",
        "bandwidth_note": note,
        "bytes_source": None if cfg.synthetic else bytes_source,
        "first_epoch_bytes_by_source": by_source,
    }


def node_figures(cfg: TrainConfig, reports: list[dict]) -> list[dict]:
    """Each node's own figures (issue 49), in the order its first rank appears: `host`, `ranks`,
        `read_mb_s` (epoch 1's reads on that node from the best counter its ranks have, as the run's own
        figure is taken, over that node's epoch-1 window; null on synthetic data), `img_s` (its ranks'
        images/s summed), `comm_share` (its ranks' mean share of step time in collectives) and its ring
    test figures (node_ring_figures; null where the test did not run). A slow node
        among peers is named from these (bench.analysis.verdict.nodes), where the run's sums would hide it."""
    hosts: dict[str, list[dict]] = {}
    for r in reports:
        hosts.setdefault(r["host"], []).append(r)
    out = []
    for host, ranks in hosts.items():
        read = None
        if not cfg.synthetic:
            try:
                epochs, _, _ = dataset_epochs(ranks, max(cfg.sample_interval_s, 1e-3))
                read = float(epochs[0]["avg_read_mb_s"]) if epochs else None
            except ValueError:  # no byte counter sampled on this node: no figure, never a guessed one
                read = None
        comm = [r["breakdown"].get("comm_share") for r in ranks if r.get("breakdown")]
        out.append(
            {
                "host": host,
                "ranks": len(ranks),
                "read_mb_s": read,
                "img_s": float(sum(r["images_per_s"] for r in ranks)),
                "comm_share": _mean_all(comm) if len(comm) == len(ranks) else None,
                **node_ring_figures(reports[0].get("ring"), host),
            }
        )
    return out


def node_ring_figures(transfers: list[dict] | None, host: str) -> dict:
    """A node's ring test figures (bench.train.dist.ring), named as nccl-tests names them: the best
    rate it received at from one of its partners (`ring_recv_algbw_mb_s`; algbw = busbw for a
    send/receive), the best rate a partner received from it at (`ring_send_algbw_mb_s`), and the
    median latency of its receives (`ring_latency_us`). The best, because a transfer is as slow as its
    slower end: a node slow toward every partner is the slow one. None each where the test did not run
    (one node, independent copies, runs before it)."""
    got = [t for t in transfers or [] if t.get("dst_host") == host and t.get("algbw_mb_s") is not None]
    gave = [t for t in transfers or [] if t.get("src_host") == host and t.get("algbw_mb_s") is not None]
    return {
        "ring_recv_algbw_mb_s": max(float(t["algbw_mb_s"]) for t in got) if got else None,
        "ring_send_algbw_mb_s": max(float(t["algbw_mb_s"]) for t in gave) if gave else None,
        "ring_latency_us": float(statistics.median(t["latency_us"] for t in got)) if got else None,
    }


def _losses(reports: list[dict]) -> dict:
    """The mean loss over every rank's first and last few steps (LOSS_WINDOW, at most half of them)."""
    loss_n = min(LOSS_WINDOW, max(1, len(reports[0]["losses"]) // 2))
    all_losses = [r["losses"] for r in reports]
    return {
        "loss_first": float(statistics.fmean(x for ls in all_losses for x in ls[:loss_n])),
        "loss_last": float(statistics.fmean(x for ls in all_losses for x in ls[-loss_n:])),
    }
