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
