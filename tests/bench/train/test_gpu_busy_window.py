"""GPU busy share from a profiled window of measured steps (bench.train.timing.GpuBusyWindow), as far
as a CPU node takes it: the window's bounds, the union of kernel intervals, the profiler's presence and
its event interface, and the empty-field rule ("no GPU", never a figure) through a real `bench train`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from bench.analysis.frame import row_from_result
from bench.errors import ConfigError
from bench.metrics.summary import busy_note
from bench.report.html import STORAGE_COLUMNS, _table
from bench.train.timing import (
    BUSY_WINDOW_ENV,
    BUSY_WINDOW_OFFSET,
    BUSY_WINDOW_STEPS,
    NO_GPU,
    GpuBusyWindow,
    busy_window,
    kernel_intervals,
    merged_ns,
    profiler_unavailable,
    window_share,
    window_steps,
)

BENCH = str(Path(sys.executable).parent / "bench")


def test_the_window_is_k_measured_steps_after_the_offset():
    window = busy_window(warmup=5, planned=100)
    assert window == range(5 + BUSY_WINDOW_OFFSET, 5 + BUSY_WINDOW_OFFSET + BUSY_WINDOW_STEPS)


def test_a_short_plan_moves_the_window_earlier_and_never_past_the_last_planned_step():
    assert busy_window(warmup=2, planned=6, steps=5, offset=3) == range(3, 8)  # steps 3..7, last planned is 7
    assert busy_window(warmup=2, planned=3, steps=5, offset=3) == range(2, 5)  # every measured step
    assert busy_window(warmup=0, planned=1, steps=5, offset=3) == range(0, 1)


def test_no_window_without_steps_to_profile():
    assert not busy_window(warmup=5, planned=100, steps=0)
    assert not busy_window(warmup=5, planned=0)


def test_window_steps_reads_the_benchmark_switch(monkeypatch):
    monkeypatch.delenv(BUSY_WINDOW_ENV, raising=False)
    assert window_steps() == BUSY_WINDOW_STEPS
    monkeypatch.setenv(BUSY_WINDOW_ENV, "0")
    assert window_steps() == 0
    monkeypatch.setenv(BUSY_WINDOW_ENV, "-1")
    with pytest.raises(ConfigError, match=BUSY_WINDOW_ENV):
        window_steps()


def test_concurrent_kernels_on_several_streams_count_once():
    compute = [(0, 10), (12, 20), (30, 40)]
    nccl = [(5, 15), (35, 50)]  # overlaps the compute stream's kernels
    assert merged_ns(compute + nccl) == 15 + 5 + 20  # [0, 20) minus the gap, [30, 50)
    assert merged_ns([(0, 10), (10, 20)]) == 20  # touching, not overlapping
    assert merged_ns([(0, 100), (10, 20), (30, 40)]) == 100  # nested
    assert merged_ns([(7, 7), (9, 3)]) == 0  # empty or reversed intervals add nothing
    assert merged_ns([]) == 0


def test_the_share_is_over_the_steps_the_profiler_did_not_slow():
    steps = [0.10] * 10 + [0.12] * 5 + [0.10] * 10  # the window's 5 steps ran slower under CUPTI
    busy_s, share = window_share(int(5 * 0.04e9), [0.12] * 5, steps)
    assert busy_s == pytest.approx(0.04) and share == pytest.approx(0.4)
    assert window_share(int(2 * 0.03e9), [0.1, 0.1], [0.1, 0.1])[1] == pytest.approx(0.3)  # nothing else measured


def _event(name: str, kind: str | None, device: DeviceType, index: int, start: int, duration: int):
    event = SimpleNamespace(
        name=lambda: name,
        device_type=lambda: device,
        device_index=lambda: index,
        start_ns=lambda: start,
        duration_ns=lambda: duration,
    )
    if kind is not None:
        event.activity_type = lambda: kind
    return event


def test_only_kernels_on_the_ranks_own_gpu_are_counted():
    events = [
        _event("ampere_sgemm", "kernel", DeviceType.CUDA, 0, 100, 50),
        _event("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", DeviceType.CUDA, 0, 0, 90),
        _event("Memset (Device)", "gpu_memset", DeviceType.CUDA, 0, 200, 5),
        _event("cudaLaunchKernel", "cuda_runtime", DeviceType.CPU, -1, 90, 5),
        _event("ncclDevKernel_AllReduce", "kernel", DeviceType.CUDA, 0, 120, 100),
        _event("ampere_sgemm", "kernel", DeviceType.CUDA, 1, 0, 999),  # another rank's GPU
    ]
    assert kernel_intervals(events, 0) == [(100, 150), (120, 220)]


def test_a_torch_without_activity_types_tells_copies_by_name():
    events = [
        _event("volta_scudnn", None, DeviceType.CUDA, 0, 0, 10),
        _event("Memcpy DtoD (Device -> Device)", None, DeviceType.CUDA, 0, 20, 10),
    ]
    assert kernel_intervals(events, 0) == [(0, 10)]


def test_the_profiler_and_its_cuda_activity_import_and_give_events_this_code_reads():
    from torch.profiler import ProfilerActivity, profile, supported_activities

    assert ProfilerActivity.CUDA is not None and ProfilerActivity.CPU in supported_activities()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = torch.randn(64, 64)
        (x @ x).sum()
    events = prof.profiler.kineto_results.events()  # the raw events GpuBusyWindow reads
    assert events and kernel_intervals(events, 0) == []  # CPU ops only: no kernel


def test_a_cpu_rank_runs_no_profiler_and_says_no_gpu():
    cpu = torch.device("cpu")
    assert profiler_unavailable(cpu) == NO_GPU
    window = GpuBusyWindow(cpu, busy_window(warmup=1, planned=20))
    assert not any(window.begin(step) or window.end(step, 0.1) for step in range(21))
    figure = window.close([0.1] * 20)
    assert (figure.busy_s, figure.share, figure.note) == (None, None, NO_GPU)


def test_the_runs_note_names_each_rank_only_where_ranks_differ():
    cpu = [{"rank": r, "gpu_busy_share": None, "gpu_busy_note": NO_GPU} for r in range(2)]
    assert busy_note(cpu) == NO_GPU
    mixed = [{"rank": 0, "gpu_busy_share": 0.4, "gpu_busy_note": None}, {**cpu[1], "gpu_busy_note": "no CUPTI"}]
    assert busy_note(mixed) == "rank 1: no CUPTI"
    assert busy_note([{"rank": 0, "gpu_busy_share": 0.4, "gpu_busy_note": None}]) is None


@pytest.mark.slow
def test_a_cpu_run_has_an_empty_busy_field_labelled_no_gpu(tmp_path):
    out = tmp_path / "m"
    args = [BENCH, "train", "--workload", "ssd", "--preset", "tiny", "--image-size", "64", "--batch-size", "4"]
    args += ["--synthetic", "--steps", "10", "--warmup-steps", "1", "--loader-threads", "1", "--metrics-out", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["measured_steps"] == 10  # the window's steps are measured steps like the others
    assert summary["utilisation"]["gpu_busy_share"] is None
    assert summary["utilisation"]["gpu_busy_note"] == NO_GPU
    rank = summary["per_rank"][0]
    assert (rank["gpu_busy_s"], rank["gpu_busy_share"], rank["gpu_busy_note"]) == (None, None, NO_GPU)
    row = row_from_result("run-1", "ssd", 1, {"state": "COMPLETED", "summary": summary}, "local", "c", "t")
    table = _table([row], STORAGE_COLUMNS)
    assert dict(zip(table["headers"], table["rows"][0], strict=True))["GPU busy"] == "no GPU"
