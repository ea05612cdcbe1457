"""The training operator: submit one (workload, scale) run, defer while it runs, collect once."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from bench.config.models import SweepConfig
from scalewatch.tasks.plan import sweep_config


class TrainScaleOperator(BaseOperator):
    """Launch `bench train` at one scale through the configured launcher; returns a small result dict.

    A failed or killed run returns state FAILED/CANCELLED/... with its reason: the suite records it as
    a failed row (never a valid result) and the expectations make the suite run fail.
    """

    template_fields = ("sweep", "run", "suite_run_id")

    def __init__(self, *, sweep: dict, run: dict, suite_run_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep, self.run, self.suite_run_id = sweep, run, suite_run_id
        self._handle: dict | None = None
        self._launcher_kwargs: dict | None = None

    def _cfg(self) -> SweepConfig:
        """The plan's config as validate_config checked it, validated once in this process."""
        return sweep_config({"sweep": self.sweep})

    def execute(self, context) -> dict:
        from bench.errors import BenchError
        from bench.launch.base import launch_failed
        from bench.launch.leftovers import submit_recorded
        from bench.suite.plan import run_spec
        from scalewatch.connections import export_s3_endpoint
        from scalewatch.launchers import from_kwargs, launcher_kwargs
        from scalewatch.triggers import RunStateTrigger, settle_seconds

        cfg = self._cfg()
        export_s3_endpoint(cfg.data)  # the ranks read the endpoint the suite staged to
        spec = run_spec(
            cfg, self.suite_run_id, self.run["workload"], int(self.run["gpus"]), self.run.get("variant", "")
        )
        self._launcher_kwargs = launcher_kwargs(cfg.where.launcher, cfg.where.conn_id, cfg.where.ssh_config)
        launcher = from_kwargs(self._launcher_kwargs)
        try:
            handle = submit_recorded(launcher, spec)
        except BenchError as error:
            self.log.error("launch failed for %s: %s", spec.run_id, error)
            return launch_failed(spec, cfg.where.launcher, error).as_dict()
        self._handle = handle
        self.log.info(
            "submitted %s as %s job %s; output in %s",
            spec.run_id,
            cfg.where.launcher,
            handle["job_id"],
            spec.output_dir,
        )
        settle = settle_seconds()
        poll_s = launcher.poll_s  # what one poll costs decides how often (bench.launch)
        self.log.info("polling every %g s; no completion event before %.0f s after deferral", poll_s, settle)
        self.defer(
            trigger=RunStateTrigger(handle, self._launcher_kwargs, poll_s, time.time() + settle),
            method_name="execute_complete",
            kwargs={"handle": handle, "launcher": self._launcher_kwargs},
            timeout=timedelta(seconds=cfg.where.time_limit_s + 300),
        )

    def execute_complete(
        self, context, event: dict | None = None, handle: dict | None = None, launcher: dict | None = None
    ) -> dict:
        from bench.launch.base import RunState, fetch_and_collect, log_tail
        from scalewatch.launchers import from_kwargs

        handle = (event or {}).get("handle") or handle
        launcher = (event or {}).get("launcher") or launcher
        if handle is None or launcher is None:
            raise RuntimeError("resumed without the run's handle; cannot collect")
        backend = from_kwargs(launcher)
        if event is None:  # trigger timed out: the run must not linger
            backend.cancel(handle)
            state, reason = RunState.TIMEOUT, "deferral timed out; run cancelled"
        else:
            state, reason = RunState(event["state"]), event["reason"]
        result = fetch_and_collect(backend, handle, state, reason)
        for path in result.log_paths:  # bounded, no link followed: a planted log cannot print a worker's file
            self.log.info("---- %s (tail) ----\n%s", path, log_tail(result.output_dir, path))
        self.log.info("run %s finished %s %s", result.run_id, result.state, result.reason)
        out = result.as_dict()
        out["summary"] = None  # XComs stay small: the summary is read from summary_path
        return out

    def on_kill(self) -> None:
        if self._handle and self._launcher_kwargs:
            from scalewatch.launchers import from_kwargs

            from_kwargs(self._launcher_kwargs).cancel(self._handle)
