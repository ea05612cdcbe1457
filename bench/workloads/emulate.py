"""An emulated accelerator: the step's compute replaced by a timed wait of the profile's seconds per batch,
as MLPerf Storage (DLIO) does, so a CPU node puts GPU-rate demand on the storage.

The rank keeps everything else of a training step (bench.train.loop): the loader's real reads (and
decode when asked), data wait, an optional allreduce of the model's gradient bytes through the same
backend, per-rank metrics and cachestat's bytes. Its "model" is one parameter of `gradient_bytes`
(at least one float): backward fills its gradient, which the backend allreduces like a real one.

The wait sleeps to a deadline taken when compute starts (time.sleep in slices, never a busy loop), so
the compute phase lasts the profile's time whatever the backward took inside it; AU = compute / step
time is then MLPerf Storage's figure: how much of the time the accelerator would have been busy.
"""

from __future__ import annotations

import time

import torch
from torch import nn

# A sleep overshoots by the scheduler's wake-up latency (tens of microseconds idle, more on a loaded
# node): the last slice is short so the overshoot is one wake-up, not a full slice.
FINAL_SLICE_S = 0.002


def wait_until(deadline: float) -> float:
    """Sleep until time.perf_counter() reaches `deadline`; returns the time it woke (never before)."""
    while True:
        now = time.perf_counter()
        left = deadline - now
        if left <= 0:
            return now
        time.sleep(left - FINAL_SLICE_S if left > 2 * FINAL_SLICE_S else left)


class EmulatedModel(nn.Module):
    """The emulated step's stand-in: one flat parameter as large as the model's gradient."""

    def __init__(self, gradient_bytes: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max(1, gradient_bytes // 4)))

    def forward(self) -> torch.Tensor:
        return (self.weight * 0.0).sum()


class Accelerator:
    """Waits `seconds` per batch from when compute starts; keeps each wait it made (the test's and the
    benchmark's figure: the wait, not the step's wall)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.waits: list[float] = []

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The step's 'forward': starts the clock, returns a zero loss over the parameter."""
        self._start = time.perf_counter()
        return model()

    def finish(self) -> None:
        """After backward: wait out the rest of the accelerator's time."""
        woke = wait_until(self._start + self.seconds)
        self.waits.append(woke - self._start)
