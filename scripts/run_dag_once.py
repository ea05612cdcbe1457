"""Run the weekly DAG once, end to end, in this process (dag.test); print progress, a summary and the verdict.

Airflow's own task logs (hundreds of lines) go to a file whose path is printed; the terminal gets one
line per suite step and per scale, then a table a person can read. Exit 0 PASSED, 1 FAILED,
3 INCONCLUSIVE, 2 when the run produced no result.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

EXIT = {"PASSED": 0, "FAILED": 1, "INCONCLUSIVE": 3}


class Progress:
    """Watches the metadata DB (suite steps) and the run folder (scales) and prints what changed."""

    def __init__(self, out, dag_id: str, started: datetime, runs_root: Path) -> None:
        self.out, self.dag_id, self.started, self.runs_root = out, dag_id, started, runs_root
        self.t0 = time.monotonic()
        self.seen: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.t0:5.0f}s] {text}\n")
        self.out.flush()

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            with contextlib.suppress(Exception):  # the DB may be busy mid-write: ask again next second
                self.poll()

    def poll(self) -> None:
        states = self._task_states()
        for task_id, state, _ in states:
            if task_id != "train" and self.seen.get(task_id) != state:
                self.seen[task_id] = state
                self.say(f"{task_id}: {state}")
        if not states:
            return
        from bench.suite.plan import suite_dir, suite_run_identity

        suite = suite_dir(self.runs_root, suite_run_identity(self.dag_id, states[0][2]))
        for state_file in sorted(suite.glob("*/state.json")):
            try:
                doc = json.loads(state_file.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            scale = state_file.parent.name
            if doc.get("state") not in ("PENDING", "RUNNING") and self.seen.get(scale) != doc["state"]:
                self.seen[scale] = doc["state"]
                # {workload}-{gpus}[-{variant}]; a workload's own name may hold '-' (retinanet-b200)
                workload, gpus, variant = re.fullmatch(r"(.+?)-(\d+)(?:-([a-z]+))?", scale).groups(default="")
                what = {"independent": " as independent copies (node ceiling)"}.get(variant, "")
                if variant and not what:
                    what = f" ({variant} rerun)"
                reason = f" ({doc['reason']})" if doc.get("reason") else ""
                self.say(f"train {workload} @ {gpus} rank(s){what}: {doc['state']}{reason}")

    def _task_states(self) -> list[tuple[str, str, str]]:
        """Finished tasks of our run, read through a read-only connection of its own (never Airflow's engine,
        which the DAG run is using in the other thread). Only for SQLite metadata, as the embedded default has."""
        import sqlite3

        from airflow.configuration import conf

        url = conf.get("database", "sql_alchemy_conn")
        if not url.startswith("sqlite:///"):
            return []
        db = sqlite3.connect(f"file:{url.removeprefix('sqlite:///')}?mode=ro", uri=True, timeout=1)
        try:
            rows = db.execute(
                "SELECT ti.task_id, ti.state, ti.run_id FROM task_instance ti JOIN dag_run r "
                "ON r.dag_id = ti.dag_id AND r.run_id = ti.run_id WHERE r.dag_id = ? AND r.start_date >= ? "
                "AND ti.map_index < 1 AND ti.state IN ('success', 'failed', 'skipped', 'upstream_failed')",
                (self.dag_id, self.started.strftime("%Y-%m-%d %H:%M:%S")),
            ).fetchall()
        finally:
            db.close()
        return rows


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.{digits}g}"


def summary_table(csv: Path) -> list[str]:
    import pandas as pd

    frame = pd.read_csv(csv)
    head = (
        f"{'workload':<14}{'GPUs':>5}  {'images/s [95% CI]':<24}{'efficiency [95% CI]':<24}{'vs':<13}{'linear':<8}"
        f"{'MB/s avg/peak':<16}{'bandwidth':<22}verdict"
    )
    lines = [head, "-" * len(head)]
    for r in frame.to_dict("records"):
        thr = (
            f"{_fmt(r['throughput_img_s'], 4)} [{_fmt(r['throughput_ci_low'], 4)}, {_fmt(r['throughput_ci_high'], 4)}]"
        )
        lo, hi = r.get("scaling_efficiency_ci_low"), r.get("scaling_efficiency_ci_high")
        eff = f"{_fmt(r['scaling_efficiency'])} [{_fmt(lo)}, {_fmt(hi)}]"
        ideal = r.get("ideal") if isinstance(r.get("ideal"), str) else "linear"
        linear = _fmt(r.get("linear_efficiency", r["scaling_efficiency"]))
        bw = f"{_fmt(r['avg_read_mb_s'])}/{_fmt(r['peak_read_mb_s'])}"
        check = bandwidth_check(r)
        verdict = str(r["verdict"])
        if verdict == "inconclusive":
            verdict += f": {r['inconclusive_reason']}"
        elif verdict == "fail" and isinstance(r.get("reason"), str) and r["reason"]:
            verdict += f": {r['reason'][:80]}"
        if isinstance(r.get("bottleneck"), str) and r["bottleneck"]:
            verdict += f"; bottleneck: {r['bottleneck']}"
        if r.get("borderline") is True:
            verdict += " (borderline: interval straddles the bound)"
        if r.get("oversubscribed") is True:
            verdict += " (oversubscribed: ranks shared cores; never enters history)"
        lines.append(
            f"{r['workload']:<14}{int(r['gpus']):>5}  {thr:<24}{eff:<24}{ideal:<13}{linear:<8}{bw:<16}{check:<22}"
            f"{verdict}"
        )
    notes = [
        f"  {r['workload']}@{int(r['gpus'])} bandwidth not checked: {r['bandwidth_note']}"
        for r in frame.to_dict("records")
        if r.get("bandwidth_valid") is not True and isinstance(r.get("bandwidth_note"), str) and r["bandwidth_note"]
    ]
    ideals = sorted({str(i) for i in frame.get("ideal", []) if isinstance(i, str)})
    legend = (
        "efficiency is against the 'vs' ideal (independent: the scale's ranks run at once as independent copies "
        "on the same slots, this node's own ceiling); linear: against N x one rank"
        if "independent" in ideals
        else "efficiency is against linear scaling (N x one rank)"
    )
    return [*lines, *notes, legend, storage_line(frame, csv.parent / "probe.json"), *at_au_lines(csv.parent)]


def at_au_lines(folder: Path) -> list[str]:
    """Per emulated workload: the accelerators the storage fed at its AU bound, measured and projected."""
    try:
        at_au = json.loads((folder / "suite.json").read_text()).get("accelerators_at_au") or {}
    except (OSError, json.JSONDecodeError):
        return []
    return [
        f"accelerators at AU: {name}: {e['accelerators']} {'measured' if e['measured'] else 'projected'} ({e['basis']})"
        for name, entries in at_au.items()
        for e in entries
    ]


def bandwidth_check(r: dict) -> str:
    """Whether epoch 1's bandwidth was a storage figure, and how it scaled (bytes counted by which counter)."""
    if r.get("bandwidth_valid") is not True:
        return "not checked"
    source = r.get("bytes_source") if isinstance(r.get("bytes_source"), str) else "?"
    eff = r.get("bandwidth_efficiency")
    if eff is None or (isinstance(eff, float) and math.isnan(eff)):
        return f"valid ({source})"
    return f"eff {_fmt(eff)} ({source})"


def storage_line(frame, probe_path: Path) -> str:
    """The storage probe's ceiling and the GPUs it feeds per workload, or why it could not be sized."""
    try:
        probe = json.loads(probe_path.read_text())
    except (OSError, json.JSONDecodeError):
        return "storage: no probe result (probe off or failed; see the log)"
    text = f"storage: fio ceiling {probe['ceiling_mb_s']:.0f} MB/s"
    if not probe["conclusive"]:
        return f"{text} (inconclusive: {probe['reason']})"
    sized = frame[frame["supported_gpus"].notna()] if "supported_gpus" in frame else frame.iloc[0:0]
    if sized.empty:
        return f"{text}; not sized: no scale has a valid, cache-free epoch-1 read rate"
    fed = ", ".join(f"{r['workload']} {int(r['supported_gpus'])}" for r in sized.to_dict("records"))
    return f"{text}; GPUs it feeds at the measured demand: {fed}"


DAG_ID = "scaling_regression"


def read_conf(text: str) -> dict:
    """The conf as the DAG will see it, checked first by the same rule as its validate_config task:
    a key the suite does not know, a bad value, or a deployment-only setting (bench.config.SetBy) ends
    here with exit 2 before anything runs."""
    from bench.config.defaults import EMBEDDED_DEFAULT
    from bench.errors import ConfigError
    from scalewatch.params import params, settings_from_params

    try:
        conf = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"conf is not valid JSON: {error}") from None
    if not isinstance(conf, dict):
        raise ConfigError("conf must be a JSON object of setting: value")
    settings_from_params({name: param.value for name, param in params(EMBEDDED_DEFAULT).items()}, conf)
    return conf


def main() -> int:
    from bench.errors import ConfigError

    try:
        conf = read_conf(sys.argv[1] if len(sys.argv) > 1 else "{}")
    except ConfigError as error:
        sys.stderr.write(f"invalid conf: {error}\n")
        return 2
    from scalewatch import paths

    log_path = Path(paths.home()) / "run-once.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    terminal = os.fdopen(os.dup(1), "w", buffering=1)
    progress = Progress(terminal, DAG_ID, datetime.now(UTC), Path(paths.output_dir()))
    progress.say(f"running the scaling_regression DAG once (Airflow logs: {log_path})")
    with log_path.open("w") as log:  # Airflow writes to fds 1/2 directly: redirect them, not sys.stdout
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        progress.thread.start()
        try:
            from airflow.dag_processing.dagbag import DagBag

            bag = DagBag()
            if bag.import_errors:
                terminal.write(f"DAG import errors: {bag.import_errors}\n")
                return 2
            run = bag.get_dag(DAG_ID).test(run_conf=conf)
        finally:
            progress.stop.set()
            progress.thread.join()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    progress.poll()
    from bench.store.db import ResultsStore
    from bench.suite.plan import suite_run_identity

    runs = ResultsStore(paths.results_url()).suite_runs()
    mine = runs[runs["suite_run_id"] == suite_run_identity(DAG_ID, run.run_id)]
    progress.say(f"dag run {run.run_id}: {run.state}")
    if mine.empty:
        terminal.write(f"verdict: NO RESULT (the run failed before evaluation; see {log_path})\n")
        return 2
    report = Path(mine.iloc[-1]["report_path"])
    suite = json.loads((report.parent / "suite.json").read_text())
    terminal.write("\n".join(summary_table(report.parent / "results.csv")) + "\n\n")
    terminal.write(f"verdict: {suite['verdict']}\nreport: {report}\nlog: {log_path}\n")
    if interfered(report.parent / "results.csv"):
        terminal.write(
            "other processes took the ranks' cores (named above): stop them, or run where they do not run, "
            "then run scripts/run-once.sh again\n"
        )
    return EXIT.get(suite["verdict"], 1)


def interfered(csv: Path) -> bool:
    """Whether a row of the run is INCONCLUSIVE for interference (issue 62): the reader is told how to rerun."""
    import pandas as pd

    # read as text: a column of empty reasons is all-NaN floats, which a "" fill warns about (pandas 3)
    reasons = pd.read_csv(csv, dtype={"inconclusive_reason": str}, keep_default_na=False)
    column = reasons.get("inconclusive_reason", pd.Series(dtype=str))
    return bool(column.str.startswith("interference:").any())


if __name__ == "__main__":
    sys.exit(main())
