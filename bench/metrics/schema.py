"""The versioned run-summary schema (docs/schemas.md documents it) and its validator."""

from __future__ import annotations

import jsonschema

SUMMARY_SCHEMA_VERSION = 5
# Where a run's dataset bytes came from (docs/metrics.md says what each one includes).
BYTE_SOURCES = ("s3", "cachestat", "mincore", "pagecache", "nfs_mountstats", "diskstats", "procio")

_num = {"type": "number"}
_num_or_null = {"type": ["number", "null"]}

EPOCH = {
    "type": "object",
    "required": [
        "epoch",
        "seconds",
        "images",
        "bytes_from_storage",
        "bytes_consumed",
        "avg_read_mb_s",
        "peak_read_mb_s",
        "cache_hit_ratio",
        "cache_distorted",
    ],
    "properties": {
        "epoch": {"type": "integer", "minimum": 1},
        "seconds": _num,
        "images": {"type": "integer"},
        "bytes_from_storage": _num,
        "bytes_consumed": _num,
        "avg_read_mb_s": _num,
        "peak_read_mb_s": _num,
        "cache_hit_ratio": _num_or_null,
        "cache_distorted": {"type": "boolean"},
        # Optional (summaries before issue 62's windows have none): what avg_read_mb_s is over
        # (bench.metrics.io.epoch_io) and the whole epoch's rate beside it.
        "read_window_s": _num,
        "read_window": {"enum": ["measured steps", "whole epoch"]},
        "whole_epoch_read_mb_s": _num,
    },
}

RANK_FIELDS = (
    "rank",
    "host",
    "images",
    "images_per_s",
    "step_time_median_s",
    "bytes_from_storage",
    "bytes_consumed",
    "samples_read",
    "measured_s",
    "step_times_s",
    "slot",
    "breakdown",
)
# Schema 5: the GPU's busy share of the step (kernel time over a profiled window of measured steps,
# bench.train.timing.GpuBusyWindow), why it is null where it is (`gpu_busy_note`: "no GPU" on a CPU node;
# optional, summaries written before it have none) and the fp16 GradScaler's skipped steps; null on a CPU
# node / without a scaler, never a made-up figure.
RANK_GPU_FIELDS = ("gpu_busy_s", "gpu_busy_share", "gpu_busy_note", "scaler_skipped_steps")
PRECISIONS = ("fp32", "bf16", "fp16")
COMPILE_MODES = ("none", "torch_compile", "cuda_graphs")
BREAKDOWN_PHASES = ("data_wait", "compute", "comm", "other")
UTILISATION_FIELDS = ("cpu_util", "mem_util", "gpu_util", "gpu_mem_util", "gpu_mem_peak_bytes")
# Beside NVML's gpu_util: the share of the step the GPU ran kernels, from the CUDA activity timeline
# (schema 5), and the note saying why it is null.
GPU_BUSY_FIELD = "gpu_busy_share"
GPU_BUSY_NOTE = "gpu_busy_note"
_note = {"type": ["string", "null"]}

RANK = {
    "type": "object",
    "required": list(RANK_FIELDS),
    "properties": {
        "rank": {"type": "integer", "minimum": 0},
        "host": {"type": "string"},
        "images": {"type": "integer", "minimum": 1},
        "images_per_s": {"type": "number", "exclusiveMinimum": 0},
        "step_time_median_s": _num,
        "gpu_busy_s": {"type": ["number", "null"], "minimum": 0},
        "gpu_busy_share": {"type": ["number", "null"], "minimum": 0},
        GPU_BUSY_NOTE: _note,
        "scaler_skipped_steps": {"type": ["integer", "null"], "minimum": 0},
        "bytes_from_storage": _num,
        "bytes_consumed": _num,
        "samples_read": {"type": "integer"},
        "measured_s": {"type": "number", "exclusiveMinimum": 0},
        "step_times_s": {"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 1},
        "breakdown": {
            "type": "object",
            "required": [f"{p}_{k}" for p in BREAKDOWN_PHASES for k in ("s", "share", "median_s")] + ["au"],
            "properties": {
                **{f"{p}_{k}": {"type": "number", "minimum": 0} for p in BREAKDOWN_PHASES for k in ("s", "median_s")},
                **{f"{p}_share": {"type": "number", "minimum": 0, "maximum": 1.000001} for p in BREAKDOWN_PHASES},
                "au": {"type": "number", "minimum": 0, "maximum": 1.000001},
            },
        },
        "slot": {
            "type": "object",
            "required": ["cpus", "gpu", "numa_node", "bound_by", "oversubscribed"],
            "properties": {
                "cpus": {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                "gpu": {"type": ["integer", "null"]},
                "numa_node": {"type": ["integer", "null"]},
                "bound_by": {"enum": ["scalewatch", "slurm", "none"]},
                "oversubscribed": {"type": "boolean"},
            },
        },
    },
}

# The scale's allreduce probe (bench.train.dist.allreduce_probe): null on one rank and on independent copies.
ALLREDUCE = {
    "type": ["object", "null"],
    "required": ["seconds", "bytes", "buckets", "bus_gb_s", "latency_s", "reps"],
    "properties": {
        "seconds": {"type": "number", "minimum": 0},
        "bytes": {"type": "integer", "minimum": 1},
        "buckets": {"type": "integer", "minimum": 1},
        "bus_gb_s": _num_or_null,
        "latency_s": {"type": "number", "minimum": 0},
        "reps": {"type": "integer", "minimum": 1},
    },
}

# The scale's ring test (bench.train.dist.ring): each transfer between ring neighbours, one node to
# another, timed where the bytes arrived; null on one node and on independent copies (optional: runs
# before it have none).
RING = {
    "type": ["array", "null"],
    "items": {
        "type": "object",
        "required": ["src_host", "dst_host", "bytes", "seconds", "algbw_mb_s", "latency_us"],
        "properties": {
            "src_host": {"type": "string"},
            "dst_host": {"type": "string"},
            "bytes": {"type": "integer", "minimum": 1},
            "seconds": {"type": "number", "minimum": 0},
            "algbw_mb_s": _num_or_null,
            "latency_us": {"type": "number", "minimum": 0},
        },
    },
}

# The checkpoint phase and the saves during training (bench.train.checkpointing; optional: runs without
# them have none). `status` done: the phase's figures (bench.storage.checkpoint.aggregate) are beside it.
CHECKPOINT = {
    "type": "object",
    "required": ["status", "error", "stall"],
    "properties": {
        "status": {"enum": ["done", "failed", "off"]},
        "error": {"type": ["string", "null"]},
        "write_mb_s": {"type": "number", "minimum": 0},
        "read_mb_s": {"type": "number", "minimum": 0},
        "bytes": {"type": "integer", "minimum": 0},
        "duration_s": {"type": "number", "minimum": 0},
        "stall": {
            "type": ["object", "null"],
            "required": ["every_steps", "saves", "seconds", "share"],
            "properties": {
                "share": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                "left": {"type": "array", "items": {"type": "string"}},  # what the saves did not remove, why
            },
        },
    },
}


SUMMARY_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "scalewatch run summary",
    "type": "object",
    "required": [
        "schema_version",
        "valid",
        "status",
        "workload",
        "preset",
        "loader",
        "synthetic",
        "ranks",
        "hosts",
        "device",
        "precision",
        "batch_size",
        "image_size",
        "measured_steps",
        "measured_s",
        "min_measure_s",
        "images_per_s",
        "images_per_s_per_rank",
        "epoch_time_s",
        "first_epoch_time_s",
        "epochs",
        "per_rank",
        "utilisation",
        "storage",
        "loss_first",
        "loss_last",
        "versions",
        "started_at",
        "ended_at",
    ],
    "properties": {
        "schema_version": {"const": SUMMARY_SCHEMA_VERSION},
        "valid": {"const": True},
        "status": {"const": "success"},
        # a real model (ssd, deeplabv3plus) or an emulated workload's name (bench/workloads)
        "workload": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"},
        # Optional (summaries before workload files have none): an emulated accelerator's rank, its
        # profile ('' when real), seconds per batch and the median wait its ranks made per batch.
        "emulated": {"type": "boolean"},
        "accelerator": {"type": "string"},
        "accelerator_s": _num_or_null,
        "accelerator_wait_median_s": _num_or_null,
        "loader": {"enum": ["dali", "torch", "synthetic"]},
        "ranks": {"type": "integer", "minimum": 1},
        "hosts": {"type": "array", "items": {"type": "string"}},
        "rendezvous": {
            "type": ["object", "null"],
            "required": ["host", "port", "interface"],
            "properties": {
                "host": {"type": "string"},
                "port": {"type": ["integer", "null"]},
                "interface": {"type": ["string", "null"]},
            },
        },
        "device": {"enum": ["cpu", "cuda"]},
        "precision": {"enum": list(PRECISIONS)},
        "compile": {"enum": list(COMPILE_MODES)},
        "scaler_skipped_steps": {"type": ["integer", "null"], "minimum": 0},
        "allreduce": ALLREDUCE,
        "ring": RING,
        "checkpoint": CHECKPOINT,
        "measured_steps": {"type": "integer", "minimum": 1},
        "images_per_s": {"type": "number", "exclusiveMinimum": 0},
        "epoch_time_s": _num,
        "first_epoch_time_s": _num,
        "epochs": {"type": "array", "items": EPOCH},
        "per_rank": {"type": "array", "items": RANK},
        "utilisation": {
            "type": "object",
            "required": list(UTILISATION_FIELDS),
            "properties": {
                **dict.fromkeys(UTILISATION_FIELDS, _num_or_null),
                GPU_BUSY_FIELD: {"type": ["number", "null"], "minimum": 0},
                GPU_BUSY_NOTE: _note,
            },
        },
        "storage": {
            "type": "object",
            "required": [
                "dataset_bytes",
                "aggregate_ram_bytes",
                "cache_risk",
                "drop_caches",
                "first_epoch_avg_read_mb_s",
                "first_epoch_peak_read_mb_s",
                "bandwidth_valid",
                "bandwidth_note",
                "bytes_source",
                "first_epoch_bytes_by_source",
            ],
            "properties": {
                "dataset_bytes": {"type": "integer"},
                "aggregate_ram_bytes": {"type": "integer"},
                "cache_risk": {"type": "boolean"},
                "drop_caches": {"enum": ["done", "not_requested", "not_permitted", "incomplete", "warmed"]},
                "first_epoch_avg_read_mb_s": _num_or_null,
                "first_epoch_peak_read_mb_s": _num_or_null,
                "bandwidth_valid": {"type": "boolean"},
                "bandwidth_note": {"type": "string"},
                "bytes_source": {"enum": [None, *BYTE_SOURCES]},
                "first_epoch_bytes_by_source": {"type": "object", "additionalProperties": _num},
                # Optional, over S3 only: every byte the ranks' GETs received in the run (warm-up and the
                # prefetch past the last step included), the figure the server's own count is checked against
                "s3_received_bytes": {"type": "integer", "minimum": 0},
                "s3_get_errors": {"type": "integer", "minimum": 0},
            },
        },
        # Optional (summaries before issue 49 have none): each node's figures (bench.metrics.summary.node_figures)
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["host", "ranks", "read_mb_s", "img_s", "comm_share"],
                "properties": {
                    "host": {"type": "string"},
                    "ranks": {"type": "integer", "minimum": 1},
                    "read_mb_s": _num_or_null,
                    "img_s": _num,
                    "comm_share": _num_or_null,
                    # the ring test's figures (bench.metrics.summary.node_ring_figures); optional
                    "ring_recv_algbw_mb_s": _num_or_null,
                    "ring_send_algbw_mb_s": _num_or_null,
                    "ring_latency_us": _num_or_null,
                },
            },
        },
        "loss_first": _num,
        "loss_last": _num,
    },
}


def validate_summary(doc: dict) -> None:
    """Raises jsonschema.ValidationError when `doc` is not a valid, successful run summary."""
    jsonschema.validate(doc, SUMMARY_SCHEMA)
