"""Polls a launched run from the triggerer, so a long training run never holds a worker slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

# Airflow 3.3 fails a deferred task whose trigger fires before the scheduler has drained the executor's
# "success" for the worker that deferred it: the resumed task is already queued or running when that stale
# event arrives ("state changed externally"; apache/airflow#67287, #71580, #72716). A 1-rank run that
# finished 5 s after its deferral hit it in CI (the stale event came 5.8 s after the defer). The event
# therefore waits until SETTLE_S after the deferral; runs that take longer are not delayed.
SETTLE_S = 15.0


def settle_seconds() -> float:
    """SETTLE_S where a scheduler and executor run the task; 0 under `dag.test()`.

    The race above is between the executor's event and the scheduler. `dag.test()` has neither: it runs
    each task and then its trigger inline, in this process, through Airflow's in-process supervisor
    comms. Waiting there only slows every test run by up to 15 s per scale, so no settle is needed.
    Anything not recognised as in-process keeps the settle.
    """
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # a future Airflow moved them: keep the safe wait
        return SETTLE_S
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    return 0.0 if isinstance(comms, InProcessSupervisorComms) else SETTLE_S


class RunStateTrigger(BaseTrigger):
    def __init__(self, handle: dict, launcher: dict, poll_s: float, settle_until: float = 0.0) -> None:
        super().__init__()
        self.handle, self.launcher, self.poll_s = handle, launcher, poll_s
        self.settle_until = settle_until  # epoch seconds: no event before (the deferral + SETTLE_S)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "scalewatch.triggers.RunStateTrigger",
            {
                "handle": self.handle,
                "launcher": self.launcher,
                "poll_s": self.poll_s,
                "settle_until": self.settle_until,
            },
        )

    async def on_kill(self) -> None:
        """The task was marked failed/cleared while deferred: the job must not outlive it (scancel etc.)."""
        from scalewatch.launchers import from_kwargs

        await asyncio.to_thread(from_kwargs(self.launcher).cancel, self.handle)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from bench.launch.base import PollPatience
        from scalewatch.launchers import from_kwargs

        launcher = from_kwargs(self.launcher)
        patience = PollPatience()
        while True:
            state, reason = patience.judge(*await asyncio.to_thread(launcher.poll, self.handle))
            if state.finished:
                await asyncio.sleep(max(0.0, self.settle_until - time.time()))
                yield TriggerEvent(
                    {"state": str(state), "reason": reason, "handle": self.handle, "launcher": self.launcher}
                )
                return
            await asyncio.sleep(self.poll_s)
