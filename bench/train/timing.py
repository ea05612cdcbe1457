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

import statistics
import time

import torch

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
# CUDA events around a step's work time its span on the GPU, and when the host is the limit that span
# is the host's own launch time: kernels run as fast as Python issues them, the GPU idles between them,
# and the events still bracket the whole step (a span share near 1 while NVML sees the GPU 36% busy).
# So the probe holds the compute stream with a spin kernel until the host has queued the step up to
# the end of backward; the events after the spin then bracket the GPU's execution only. Each probe
# step's hold is checked: a spin that ended before the host finished queueing gives no figure, and
# the next probe step (every rank's, agreed) spins twice as long.
PROBE_STEPS = 3
PROBE_HOLD_FACTOR = 2.0  # the first spin lasts this many measured step times
PROBE_TRIES = 4  # at most PROBE_STEPS * PROBE_TRIES probe steps


def busy_share(busy_s: list[float], step_time_s: float) -> float | None:
    """GPU busy time of a step over its measured wall time (median probe over the median measured
    step); None where no probe held (never a guessed figure)."""
    if not busy_s or step_time_s <= 0:
        return None
    return float(statistics.median(busy_s) / step_time_s)


def held(host_queued_s: float, spin_s: float) -> bool:
    """The spin outlasted the host's queueing: the GPU never waited for a launch inside the window."""
    return host_queued_s < spin_s


class GpuBusyProbe:
    """Times a step's GPU execution from CUDA events on the compute stream (see above)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._cycles_per_s: float | None = None

    def _calibrate(self) -> float:
        if self._cycles_per_s is None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            cycles = 10_000_000
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_s = cycles / max(start.elapsed_time(end) / 1e3, 1e-9)
        return self._cycles_per_s

    def step(self, run, hold_s: float) -> float | None:
        """GPU seconds of one step, None where the hold ended too soon. `run(mark)` runs the step
        and calls mark("compute") after queueing backward, mark("comm") after the gradient sync and
        mark("end") after the optimizer step. One step each call: a retry is a collective decision."""
        torch.cuda.synchronize(self.device)
        events = {k: torch.cuda.Event(enable_timing=True) for k in ("spin", "start", "compute", "comm", "end")}
        host: dict[str, float] = {}
        cycles = int(hold_s * self._calibrate())
        events["spin"].record()
        torch.cuda._sleep(cycles)
        events["start"].record()
        host["start"] = time.perf_counter()

        def mark(phase: str) -> None:
            events[phase].record()
            host[phase] = time.perf_counter()

        run(mark)
        events["end"].synchronize()
        spin_s = events["spin"].elapsed_time(events["start"]) / 1e3
        if not held(host["compute"] - host["start"], spin_s):
            return None
        compute = events["start"].elapsed_time(events["compute"]) / 1e3
        return compute + events["comm"].elapsed_time(events["end"]) / 1e3
