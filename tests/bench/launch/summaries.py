"""A schema-valid run summary for tests that exercise collection, not training."""

from __future__ import annotations

from bench.metrics.schema import SUMMARY_SCHEMA_VERSION, validate_summary


def valid_summary(**over) -> dict:
    epoch = {
        "epoch": 1,
        "seconds": 1.0,
        "images": 8,
        "bytes_from_storage": 0.0,
        "bytes_consumed": 0.0,
        "avg_read_mb_s": 0.0,
        "peak_read_mb_s": 0.0,
        "cache_hit_ratio": None,
        "cache_distorted": False,
    }
    rank = {
        "rank": 0,
        "host": "n1",
        "images": 8,
        "images_per_s": 8.0,
        "step_time_median_s": 1.0,
        "bytes_from_storage": 0.0,
        "bytes_consumed": 0.0,
        "samples_read": 8,
        "measured_s": 1.0,
        "step_times_s": [1.0],
        "slot": {"cpus": [0], "gpu": None, "numa_node": None, "bound_by": "scalewatch", "oversubscribed": False},
        "breakdown": {
            **{f"{p}_{k}": 0.25 for p in ("data_wait", "compute", "comm", "other") for k in ("s", "share", "median_s")},
            "au": 0.25,
        },
    }
    doc = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "valid": True,
        "status": "success",
        "workload": "ssd",
        "preset": "tiny",
        "loader": "synthetic",
        "synthetic": True,
        "ranks": 1,
        "hosts": ["n1"],
        "device": "cpu",
        "precision": "fp32",
        "batch_size": 8,
        "image_size": 64,
        "measured_steps": 1,
        "measured_s": 1.0,
        "min_measure_s": 0.0,
        "images_per_s": 8.0,
        "images_per_s_per_rank": [8.0],
        "epoch_time_s": 1.0,
        "first_epoch_time_s": 1.0,
        "epochs": [epoch],
        "per_rank": [rank],
        "utilisation": dict.fromkeys(("cpu_util", "mem_util", "gpu_util", "gpu_mem_util", "gpu_mem_peak_bytes")),
        "storage": {
            "dataset_bytes": 0,
            "aggregate_ram_bytes": 1,
            "cache_risk": False,
            "drop_caches": "not_requested",
            "first_epoch_avg_read_mb_s": None,
            "first_epoch_peak_read_mb_s": None,
            "bandwidth_valid": False,
            "bandwidth_note": "no dataset read (synthetic data)",
            "bytes_source": None,
            "first_epoch_bytes_by_source": {},
        },
        "loss_first": 1.0,
        "loss_last": 0.5,
        "versions": {},
        "started_at": "2026-01-01T00:00:00+00:00",
        "ended_at": "2026-01-01T00:00:01+00:00",
    }
    doc.update(over)
    validate_summary(doc)
    return doc
