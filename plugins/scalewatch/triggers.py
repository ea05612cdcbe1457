"""Polls a launched run from the triggerer, so a long training run never holds a worker slot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class RunStateTrigger(BaseTrigger):
    def __init__(self, handle: dict, launcher: dict, poll_s: float = 2.0) -> None:
        super().__init__()
        self.handle, self.launcher, self.poll_s = handle, launcher, poll_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "scalewatch.triggers.RunStateTrigger",
            {"handle": self.handle, "launcher": self.launcher, "poll_s": self.poll_s},
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
                yield TriggerEvent(
                    {"state": str(state), "reason": reason, "handle": self.handle, "launcher": self.launcher}
                )
                return
            await asyncio.sleep(self.poll_s)
