"""Where each measured step's time goes: data wait, compute, exposed communication, the rest.

- data wait: blocked on the loader for the next batch;
- compute: forward + backward. On a GPU it ends at a CUDA event recorded on the compute stream, not
  a device-wide sync, which would also wait for Horovod's allreduce on its own stream and count
  communication as compute;
- exposed communication: `optimizer.synchronize()` on its own (waiting for the gradient allreduce
  that backward started; the overlapped part is hidden inside compute, as in production), then
  `optimizer.step()` runs under `skip_synchronize()`;
- other: the optimizer step, the loss read-back, Python.
A slow rank shows up as communication wait on every other rank: the bottleneck rules look at data
wait and compute per rank before they blame the network.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType

from bench.errors import ConfigError

PHASES = ("data_wait", "compute", "comm", "other")


class StepTimer:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.steps: list[dict[str, float]] = []
        self._t: dict[str, float] = {}

    def start(self, t_prev: float) -> None:
        self._t = {"start": t_prev}

    def mark(self, phase: str) -> None:
        """End of `phase` ("data_wait", "compute", "comm")."""
        if phase == "compute" and self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()  # on the current (compute) stream only
            event.synchronize()
        self._t[phase] = time.perf_counter()

    def finish(self, now: float, measured: bool) -> None:
        t = self._t
        if not measured:
            return
        data = t["data_wait"] - t["start"]
        compute = t["compute"] - t["data_wait"]
        comm = t["comm"] - t["compute"]
        self.steps.append({"data_wait": data, "compute": compute, "comm": comm, "other": max(0.0, now - t["comm"])})

    def summary(self, skip_first: bool) -> dict:
        """Sums, shares of measured time and per-step medians; AU = compute / wall (first step excluded
        when no warm-up step already dropped it, as MLPerf Storage does)."""
        steps = self.steps[1:] if skip_first and len(self.steps) > 1 else self.steps
        wall = sum(sum(s.values()) for s in steps) or 1e-12
        out: dict[str, float] = {}
        for phase in PHASES:
            values = [s[phase] for s in steps]
            out[f"{phase}_s"] = float(sum(values))
            out[f"{phase}_share"] = float(sum(values) / wall)
            out[f"{phase}_median_s"] = float(statistics.median(values)) if values else 0.0
        out["au"] = out["compute_share"]
        return out


# GPU busy time --------------------------------------------------------------------------------------
# The GPU's kernel time per step over a window of measured steps, read from the CUDA activity timeline
# (CUPTI, through torch.profiler), over the mean measured step outside it. It does not depend on the
# host queueing ahead: CUDA events around a step time its span, which is the host's own launch time where
# the host is the limit, and the held-stream probe that replaced them never held on a DDP rank, whose
# host never queues a step ahead. The kernels' own start and end times do not care how they were launched.
# Every rank profiles the same step indices (a function of the run's config only: no collective).
BUSY_WINDOW_STEPS = 5  # K measured steps profiled: a few thousand kernels on SSD300 or DeepLabv3+
BUSY_WINDOW_OFFSET = 3  # after this many measured steps: the first ones still settle (allocator, autotune)
BUSY_WINDOW_ENV = "SCALEWATCH_BUSY_WINDOW_STEPS"  # 0 turns the window off: benchmarks/ measures its overhead
NO_GPU = "no GPU"


def window_steps() -> int:
    """K from the environment (the overhead benchmark's A/B switch), else BUSY_WINDOW_STEPS."""
    raw = os.environ.get(BUSY_WINDOW_ENV, "").strip()
    if not raw:
        return BUSY_WINDOW_STEPS
    if not raw.isdigit():
        raise ConfigError(f"{BUSY_WINDOW_ENV}={raw!r}: must be a whole number of steps >= 0 (0 turns the window off)")
    return int(raw)


def busy_window(warmup: int, planned: int, steps: int = BUSY_WINDOW_STEPS, offset: int = BUSY_WINDOW_OFFSET) -> range:
    """The global step indices profiled: `steps` measured steps from the `offset`-th measured one, moved
    earlier (and shortened) so they lie inside the `planned` measured steps; empty when either is 0.
    Only the config decides it, so every rank gets the same window without agreeing on it."""
    if steps <= 0 or planned <= 0:
        return range(0)
    k = min(steps, planned)
    start = warmup + min(offset, planned - k)
    return range(start, start + k)


def merged_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals: kernels running at once on several streams (NCCL
    beside the compute stream) count once, as NVML counts a GPU with any kernel running as busy."""
    total, run_start, run_end = 0, 0, None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if run_end is None or start > run_end:
            total += 0 if run_end is None else run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    return total + (0 if run_end is None else run_end - run_start)


def _is_kernel(event) -> bool:
    """A kernel on the device, not a copy or a memset (NVML's busy counts kernels only); torch builds
    without the event's activity type are told by name, as their profiler tables name copies."""
    kind = getattr(event, "activity_type", None)
    if kind is not None:
        return kind() == "kernel"
    return not event.name().startswith(("Memcpy", "Memset"))


def kernel_intervals(events: Iterable, device_index: int) -> list[tuple[int, int]]:
    """[start, end) in ns of every kernel the profiler recorded on this rank's GPU."""
    return [
        (e.start_ns(), e.start_ns() + e.duration_ns())
        for e in events
        if e.device_type() == DeviceType.CUDA and e.device_index() == device_index and _is_kernel(e)
    ]


def window_share(busy_ns: int, window_s: list[float], step_times: list[float]) -> tuple[float, float]:
    """(kernel seconds per window step, their share of the mean measured step outside the window; of the
    window's own mean step where it is every measured step)."""
    busy_s = busy_ns / 1e9 / len(window_s)
    others = len(step_times) - len(window_s)
    step_s = (sum(step_times) - sum(window_s)) / others if others > 0 else statistics.fmean(window_s)
    return busy_s, busy_s / max(step_s, 1e-12)


def profiler_unavailable(device: torch.device) -> str | None:
    """Why no kernel timeline can be recorded for `device` (the figure is then null with this reason),
    None where torch.profiler can trace CUDA kernels."""
    if device.type != "cuda":
        return NO_GPU
    try:
        from torch.profiler import ProfilerActivity, supported_activities
    except ImportError as error:
        return f"torch.profiler does not import: {error}"
    if ProfilerActivity.CUDA not in supported_activities():
        return "torch.profiler cannot trace CUDA kernels here (no CUPTI in this torch build)"
    return None


@dataclass
class BusyFigure:
    """A rank's GPU busy figures: both null with a note saying why, never a guess."""

    busy_s: float | None  # kernel seconds per window step (mean)
    share: float | None  # busy_s over the mean measured step outside the window
    note: str | None


class GpuBusyWindow:
    """Profiles the window's steps and reads their kernel time. The loop asks `begin(step)` before each
    step and `end(step, seconds)` after it. Both answer True at the window's first and last step on a
    GPU rank, whether or not the profiler could start there: the loop then meets the other ranks
    (a barrier, the same on every rank so collectives stay matched) and restarts its clock, so the
    profiler's start-up, stop and read-out stay out of the step times."""

    def __init__(self, device: torch.device, window: range) -> None:
        self.device, self.window = device, window
        self.note = profiler_unavailable(device) or (None if window else f"busy window off ({BUSY_WINDOW_ENV}=0)")
        self.timed = device.type == "cuda" and bool(window)
        self._begun = False  # an epoch that ends at the window's start asks again in the next one
        self._prof = None
        self._wall: list[float] = []
        self._busy_ns: int | None = None

    def begin(self, step: int) -> bool:
        if not self.timed or self._begun or step != self.window.start:
            return False
        self._begun = True
        if self.note is None:
            self._start()
        return True

    def end(self, step: int, step_time_s: float) -> bool:
        if not self.timed or step not in self.window:
            return False
        self._wall.append(step_time_s)
        if step != self.window[-1]:
            return False
        if self._prof is not None:
            self._stop()
        return True

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        # Kineto leaves CUPTI attached after a trace unless told to tear it down, and an attached CUPTI
        # slowed the rest of training by 10-20% (pytorch/pytorch#144455). torch itself turns teardown off
        # where its CUDA graphs need that; a value set by the user is kept.
        os.environ.setdefault("TEARDOWN_CUPTI", "1")
        try:
            prof = profile(activities=[ProfilerActivity.CUDA])
            prof.start()
        except RuntimeError as error:  # CUPTI taken (another profiler attached) or refused
            self.note = f"torch.profiler did not start: {error}"
            return
        self._prof = prof

    def _stop(self) -> None:
        prof, self._prof = self._prof, None
        prof.stop()
        try:
            events = prof.profiler.kineto_results.events()
        except AttributeError as error:  # a torch whose profiler keeps no raw events
            self.note = f"torch.profiler gave no kernel events: {error}"
            return
        index = self.device.index or 0
        intervals = kernel_intervals(events, index)
        if not intervals:
            seen = sorted({e.device_index() for e in events if e.device_type() == DeviceType.CUDA})
            where = f"device events on CUDA device(s) {seen}, none a kernel here" if seen else "CUPTI traced nothing"
            self.note = f"torch.profiler recorded no kernel on CUDA device {index} in the window ({where})"
            return
        self._busy_ns = merged_ns(intervals)

    def close(self, step_times: list[float]) -> BusyFigure:
        """The figures, given every measured step's time; a run that ended inside the window stops the
        profiler and keeps the steps it had. The share divides the window's kernel time per step by the
        mean time of the measured steps outside it: CUPTI adds host time to every launch inside the
        window, and where the host is the limit the window's own steps run slower by that much."""
        if self._prof is not None:
            self._stop()
        if self.note is not None or self._busy_ns is None or not self._wall:
            return BusyFigure(None, None, self.note or "no step of the window was measured")
        busy_s, share = window_share(self._busy_ns, self._wall, step_times)
        return BusyFigure(busy_s, share, None)
