"""scalewatch benchmarks: ratios measured side by side in one run, medians over repeats.

Not a test: numbers go to stdout and benchmarks/RESULTS.md with the machine they came from.
Usage: python benchmarks/run.py [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KIND = {"ssd": "coco", "deeplabv3plus": "segmentation"}
BLKIO = Path("/sys/fs/cgroup/blkio")


def median(fn: Callable[[], float], repeats: int) -> float:
    return float(statistics.median(fn() for _ in range(repeats)))


def paired(
    run_a: Callable[[], float],
    run_b: Callable[[], float],
    min_pairs: int = 6,
    max_pairs: int = 12,
    half_width: float = 0.03,
) -> dict:
    """A/B/A/B... until the 95% interval of the ratio A/B is within +-half_width (or max_pairs).

    Each pair's ratio cancels the machine's slow drift; the interval is a t-interval on the mean log
    ratio (a geometric mean ratio), so 1.10 and 1/1.10 weigh the same.
    """
    from scipy import stats

    logs: list[float] = []
    while len(logs) < max_pairs:
        logs.append(float(np.log(run_a() / run_b())))
        if len(logs) >= min_pairs:
            lo, hi = _t_interval(logs, stats)
            if (np.exp(hi) - np.exp(lo)) / 2 <= half_width:
                break
    lo, hi = _t_interval(logs, stats)
    return {
        "ratio": float(np.exp(np.mean(logs))),
        "low": float(np.exp(lo)),
        "high": float(np.exp(hi)),
        "pairs": len(logs),
        "resolved": (np.exp(hi) - np.exp(lo)) / 2 <= half_width,
    }


def _t_interval(logs: list[float], stats) -> tuple[float, float]:
    m, sd, n = float(np.mean(logs)), float(np.std(logs, ddof=1)), len(logs)
    h = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n)
    return m - h, m + h


def describe(p: dict, target: str) -> str:
    note = "" if p["resolved"] else f"; the machine cannot resolve +-3% in {p['pairs']} pairs"
    return f"{target}; 95% CI [{p['low']:.3f}, {p['high']:.3f}], {p['pairs']} interleaved pairs{note}"


def train(args: list[str], prefix: str = "", pin: str | None = None) -> dict:
    out = Path(tempfile.mkdtemp(prefix="swb-"))
    cmd = [str(BIN / "bench"), "train", *args, "--metrics-out", str(out)]
    if pin is not None:  # one core, as a rank's slot: the comparison is not two threads fighting for two cores
        cmd = ["taskset", "-c", pin, *cmd]
    if prefix:
        cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    summary = json.loads((out / "summary.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return summary


# 1. DALI vs torch DataLoader -------------------------------------------------------------------
def loader_rate(workload: str, kind: str, data: Path, threads: int, batch: int, size: int) -> float:
    import torch

    from bench.config import TrainConfig
    from bench.loaders.base import Shard
    from bench.loaders.registry import build_loader
    from bench.models.registry import build

    model = build(workload, "tiny", size).model
    cfg = TrainConfig(
        workload=workload, data=data, steps=1, batch_size=batch, image_size=size, loader=kind, loader_threads=threads
    )
    loader = build_loader(cfg, model, Shard(0, 1), torch.device("cpu"))
    next(iter(loader.epoch()))  # pipeline / worker start-up is not throughput
    start, n = time.perf_counter(), 0
    for _ in range(2):
        for batch_ in loader.epoch():
            n += batch_["images"].shape[0]
    rate = n / (time.perf_counter() - start)
    loader.close()
    return rate


# 5. Horovod's own synthetic benchmark approach (pytorch_synthetic_benchmark.py) ---------------------
def horovod_style_synthetic(workload: str, batch: int, size: int, seconds: float = 8.0) -> float:
    """The loop of Horovod's pytorch_synthetic_benchmark.py (timeit over batches of one fixed batch)."""
    import timeit

    import torch

    from bench.config import TrainConfig
    from bench.loaders.synthetic import SyntheticLoader
    from bench.models.registry import build

    torch.set_num_threads(1)
    torch.manual_seed(0)
    built = build(workload, "tiny", size)
    model = built.model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = SyntheticLoader(
        TrainConfig(workload=workload, synthetic=True, steps=1, batch_size=batch, image_size=size),
        model,
        torch.device("cpu"),
    ).batch

    def step():
        opt.zero_grad()
        built.loss(model, data).backward()
        opt.step()

    timeit.timeit(step, number=3)  # warm-up, as the Horovod script does
    per_step = timeit.timeit(step, number=3) / 3
    batches = max(1, int(seconds / 3 / per_step))
    times = [timeit.timeit(step, number=batches) for _ in range(3)]
    return batch * batches / statistics.mean(times)


def horovod_loop_pinned(workload: str, batch: int, size: int, pin: str) -> float:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks.run import horovod_style_synthetic; "
        f"print(horovod_style_synthetic({workload!r}, {batch}, {size}))"
    )
    done = subprocess.run(
        ["taskset", "-c", pin, sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


# 4. storage truth --------------------------------------------------------------------------------
def fio_mb_s(directory: Path, prefix: str = "") -> float:
    cmd = [
        "fio",
        "--name=read",
        f"--opendir={directory}",
        "--rw=read",
        "--bs=128k",
        "--direct=1",
        "--ioengine=psync",
        "--output-format=json",
    ]
    if prefix:
        cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
    for _ in range(3):  # fio has been seen to report an empty job once in a while: retry, never divide by 0
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
        report = done.stdout[done.stdout.index("{") :]  # fio prints "opendir added N files" first
        read = json.loads(report)["jobs"][0]["read"]
        if read["io_bytes"] > 0 and read["runtime"] > 0:
            return read["io_bytes"] / (read["runtime"] / 1000) / 1e6
    raise RuntimeError(f"fio read nothing from {directory}: {done.stdout[-500:]}")


def throttle(device: str, rate: int):
    group = BLKIO / f"scalewatch-bench-{os.getpid()}"
    group.mkdir(exist_ok=True)
    (group / "blkio.throttle.read_bps_device").write_text(f"{device} {rate}\n")
    return group, f"echo $$ > {group}/cgroup.procs"


def release(group: Path, device: str) -> None:
    (group / "blkio.throttle.read_bps_device").write_text(f"{device} 0\n")
    group.rmdir()


# 6. orchestration --------------------------------------------------------------------------------
def dag_parse_s() -> float:
    code = (
        "import time, os; from airflow.dag_processing.dagbag import DagBag; "
        f"t = time.perf_counter(); b = DagBag(dag_folder={str(ROOT / 'dags' / 'scaling_regression.py')!r}); "
        "assert not b.import_errors, b.import_errors; print(time.perf_counter() - t)"
    )
    env = os.environ | {"PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def trigger_to_first_step_s(home: Path) -> float:
    env = os.environ | {"SCALEWATCH_HOME": str(home), "AIRFLOW_HOME": str(home / "airflow")}
    subprocess.run(
        ["bash", "-c", "source scripts/env.sh && mkdir -p $AIRFLOW_HOME && airflow db migrate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
    )
    conf = json.dumps({"workloads": ["ssd"], "gpus": [1], "steps": 3, "dataset_images": 32})
    start = time.time()
    subprocess.run(
        ["bash", "-c", f"source scripts/env.sh && python scripts/run_dag_once.py '{conf}'"],
        cwd=ROOT,
        env=env,
        capture_output=True,
    )
    samples = [
        json.loads(line) for f in (home / "runs").rglob("samples-rank*.jsonl") for line in f.read_text().splitlines()
    ]
    first = min(s["t"] for s in samples if s.get("phase") == "train")
    return first - start


def history_timings(tmp: Path) -> dict:
    from bench.analysis.detect import change_points
    from bench.analysis.expectations import prepare, validate
    from bench.analysis.frame import build_frame
    from bench.analysis.scaling import derive
    from bench.config import Thresholds
    from bench.store.db import ResultsStore

    rng = np.random.default_rng(0)
    weeks = pd.date_range("2016-12-05", periods=520, freq="W-MON", tz="UTC")
    models = [f"model{i:02d}" for i in range(20)]
    scales = [4, 16, 24, 32, 64]
    rows = []
    for m in models:
        for g in scales:
            level = 100.0 * g * rng.uniform(0.8, 1.0)
            series = rng.normal(level, level * 0.02, len(weeks))
            series[300:] *= 0.9 if (models.index(m) + g) % 7 == 0 else 1.0
            rows += [
                {"timestamp": t, "model": m, "gpus": g, "throughput_img_s": v}
                for t, v in zip(weeks, series, strict=True)
            ]
    history = pd.DataFrame(rows)
    t = time.perf_counter()
    cps = change_points(history, "throughput_img_s")
    detect_s = time.perf_counter() - t
    latest = history[history["timestamp"] == weeks[-1]].rename(columns={"model": "workload"})
    frame = latest.assign(
        state="COMPLETED",
        valid=True,
        reason="",
        epoch_time_s=np.nan,
        avg_read_mb_s=np.nan,
        peak_read_mb_s=np.nan,
        gpu_util=np.nan,
        bandwidth_valid=True,
    )
    t = time.perf_counter()
    validate(prepare(derive(frame), Thresholds()), Thresholds())
    evaluate_s = time.perf_counter() - t
    store = ResultsStore(f"sqlite:///{tmp}/history.db")
    stored = build_frame(
        [
            {
                "suite_run_id": f"w{ts:%Y%m%d}",
                "workload": r.model,
                "gpus": r.gpus,
                "state": "COMPLETED",
                "valid": True,
                "throughput_img_s": r.throughput_img_s,
                "cluster": "c",
                "config_key": "k",
                "started_at": ts.isoformat(),
                "launcher": "slurm",
                "reason": "",
                "versions": "{}",
                "schema_version": 1,
                "cache_risk": False,
                "bandwidth_valid": True,
                "drop_caches": "done",
            }
            for r, ts in zip(history.itertuples(), history["timestamp"], strict=True)
        ]
    ).assign(accepted=True)
    t = time.perf_counter()
    store.upsert(stored)
    upsert_s = time.perf_counter() - t
    current = latest.rename(columns={}).assign(cluster="c", config_key="k")
    t = time.perf_counter()
    store.history_median(current.reset_index(drop=True), 8, "now")
    history_s = time.perf_counter() - t
    return {
        "series": 100,
        "weeks": 520,
        "change_points": len(cps),
        "detect_s": detect_s,
        "evaluate_s": evaluate_s,
        "store_upsert_52k_s": upsert_s,
        "history_median_100_s": history_s,
    }


def storage_truth(tmp: Path, r: int, add) -> None:
    from bench.data.generate import GenerateSpec, generate

    big = tmp / "big"
    generate(GenerateSpec("coco", big, images=240, min_side=700, max_side=900, seed=6))
    true_bytes = sum(f.stat().st_size for f in (big / "images").iterdir())
    io_args = [
        "--workload",
        "ssd",
        "--data",
        str(big),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--drop-caches",
        "--sample-interval",
        "0.25",
    ]
    train(["--workload", "ssd", "--data", str(big), "--steps", "2"])
    cold = [train(io_args)["epochs"][0] for _ in range(r)]
    add(
        "4 truth",
        "storage bytes reported / true bytes (cold epoch)",
        f"{statistics.median(e['bytes_from_storage'] for e in cold) / true_bytes:.4f}",
        "target within 0.98-1.02",
    )
    fio = median(lambda: fio_mb_s(big / "images"), r)
    harness = statistics.median(e["avg_read_mb_s"] for e in cold)
    add(
        "4 truth",
        "harness epoch-1 MB/s / fio MB/s, same files, unthrottled",
        f"{harness / fio:.3f}",
        f"({harness:.0f} vs {fio:.0f} MB/s: the loader, not the disk, is the limit here)",
    )
    if (BLKIO / "blkio.throttle.read_bps_device").exists():
        st = os.stat(big)
        device, rate = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", 20 * 2**20
        group, prefix = throttle(device, rate)
        try:
            throttled = statistics.median(train(io_args, prefix)["epochs"][0]["avg_read_mb_s"] for _ in range(r))
            fio_t = median(lambda: fio_mb_s(big / "images", prefix), r)
        finally:
            release(group, device)
        add(
            "4 truth",
            "harness MB/s / blkio throttle (20 MiB/s)",
            f"{throttled / (rate / 1e6):.3f}",
            "target within 0.90-1.10",
        )
        add("4 truth", "harness MB/s / fio MB/s, both under the throttle", f"{throttled / fio_t:.3f}")


def orchestration(tmp: Path, r: int, add) -> None:
    add("6 orchestr.", "DAG file parse time (DagBag, s)", f"{median(dag_parse_s, max(r, 5)):.3f}")
    add("6 orchestr.", "trigger -> first training step (dag.test, s)", f"{trigger_to_first_step_s(tmp / 'home'):.1f}")
    h = history_timings(tmp)
    add(
        "6 orchestr.",
        "detect: 100 series x 520 weeks, E-Divisive + noise rules (s)",
        f"{h['detect_s']:.2f}",
        f"({h['change_points']} change points; 14 steps planted)",
    )
    add("6 orchestr.", "evaluate: GX suite over 100 configurations (s)", f"{h['evaluate_s']:.2f}")
    add("6 orchestr.", "store: upsert 52,000 history rows (SQLite, s)", f"{h['store_upsert_52k_s']:.2f}")
    add("6 orchestr.", "store: history medians for 100 rows (s)", f"{h['history_median_100_s']:.2f}")


# 12. Change points users can trust ---------------------------------------------------------------
def _detection_scores(series) -> tuple:
    """(offline score, online score, replay seconds): online counts what the weekly check sends."""
    from bench.analysis.detect import find_steps, replay
    from bench.analysis.labelled_history import score

    off = score(series, {s.name: [(c.index, c.index) for c in find_steps(s.values)] for s in series})
    t = time.perf_counter()
    on = score(series, {s.name: [(f.step.index, f.flagged_at) for f in replay(s.values) if f.alerted] for s in series})
    return off, on, time.perf_counter() - t


def _detection_rows(add, label: str, what: str, off, on, replay_s: float) -> None:
    from scipy.stats import binomtest, chi2

    def wilson(k: int, n: int) -> str:
        low, high = binomtest(k, n).proportion_ci(0.95, method="wilson") if n else (float("nan"),) * 2
        return f"95% CI {low:.3f}-{high:.3f}"

    add(
        label,
        f"offline precision, {what}",
        f"{off.precision:.3f}",
        f"target >= 0.95 ({off.false_alarms} false of {off.detected}; {wilson(off.true_positive, off.detected)})",
    )
    add(
        label,
        "offline recall, targeted steps",
        f"{off.recall:.3f}",
        f"target >= 0.95 ({off.targeted_found} of {off.targeted}; {wilson(off.targeted_found, off.targeted)})",
    )
    quick = sum(d <= 3 for d in on.delays)
    add(
        label,
        "online: targeted steps alerted within 3 runs after the step",
        f"{on.within(3):.3f}",
        f"target >= 0.90 ({quick} of {on.targeted}; {wilson(quick, on.targeted)}; within 2: {on.within(2):.3f}; "
        f"ever alerted: {on.recall:.3f})",
    )
    k, years = on.false_alarms, on.series_years / 100  # exact Poisson interval for k alerts
    fa_low = chi2.ppf(0.025, 2 * k) / 2 / years if k else 0.0
    fa_high = chi2.ppf(0.975, 2 * k + 2) / 2 / years
    add(
        label,
        "online: false alarms per 100 series-years",
        f"{on.false_alarms_per_100_series_years:.2f}",
        f"target <= 1 ({k} in {on.series_years:.0f} series-years; 95% CI {fa_low:.2f}-{fa_high:.2f}); "
        f"replay {replay_s:.0f} s",
    )


def detection(
    add,
    n_series: int = 400,
    seeds: tuple[int, ...] = (60, 61, 62, 63),
    real_seeds: tuple[int, ...] = tuple(range(200, 220)),
) -> None:
    """Precision, recall and online delay on labelled histories, on seeds never used in tuning (0-4,
    20-21, 30-33, 40-43 and 50-53 of the plain family and 100-109 of the realistic one were)."""
    from bench.analysis.labelled_history import labelled_histories, realistic_histories

    series = [s for seed in seeds for s in labelled_histories(n_series // len(seeds), weeks=156, seed=seed)]
    what = (
        f"{len(series)} labelled series x 3 years (noise 1-3%, steps 5-15%, drifts, 5% weeks missing; seeds "
        f"{seeds[0]}-{seeds[-1]})"
    )
    _detection_rows(add, "12 detect", what, *_detection_scores(series))
    real = [s for seed in real_seeds for s in realistic_histories(seed=seed)]
    what = (
        f"{len(real)} realistic series x 2 years (2 one-week dips of 20-35% each, 5 drifts and 20 steps of 7-15% "
        f"per 40 series, noise 1.5-3%, 5% weeks missing; seeds {real_seeds[0]}-{real_seeds[-1]})"
    )
    _detection_rows(add, "12 dips", what, *_detection_scores(real))


# 8. The embedded default's bound ------------------------------------------------------------------
def default_sweep_efficiencies(tmp: Path, runs: int) -> dict[str, list[float]]:
    """`bench sweep` with the embedded default, `runs` times: each sweep is one interleaved 1 -> 2 rank pair
    per workload through the same code path as README command 1 (local launcher, rank slots, 10 s windows)."""
    home = tmp / "bound"
    home.mkdir(exist_ok=True)
    found: dict[str, list[float]] = {}
    for i in range(runs):
        done = subprocess.run(
            [
                str(BIN / "bench"),
                "sweep",
                "--results-url",
                f"sqlite:///{home / 'results.db'}",
                "--suite-run-id",
                f"bound-{i}",
            ],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode not in (0, 1):  # 1: a scale below the bound is a figure too
            raise RuntimeError(done.stderr[-2000:])
        frame = pd.read_csv(home / "scalewatch-home" / "runs" / f"bound-{i}" / "results.csv")
        for row in frame[frame["gpus"] == 2].itertuples():
            found.setdefault(row.workload, []).append(float(row.scaling_efficiency))
        print(f"  bound run {i}: " + ", ".join(f"{w} {v[-1]:.3f}" for w, v in found.items()), flush=True)
    return found


def default_bound(tmp: Path, add, runs: int = 10) -> None:
    from scipy import stats

    for workload, values in default_sweep_efficiencies(tmp, runs).items():
        a = np.array(values)
        h = stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a))
        add(
            "8 bound",
            f"{workload}: embedded default 1 -> 2 ranks scaling efficiency",
            f"{np.median(a):.3f}",
            f"mean 95% CI [{a.mean() - h:.3f}, {a.mean() + h:.3f}]; min {a.min():.3f}, max {a.max():.3f}; "
            f"{len(a)} sweeps",
        )


# 9. Step-time breakdown cost ----------------------------------------------------------------------
def timing_overhead(add) -> None:
    """The StepTimer's own cost per step (its perf_counter marks and bookkeeping, CPU path) against a
    median embedded-default step: the instrumentation is in every run, so it cannot be A/B'd in situ."""
    import torch

    from bench.train.timing import StepTimer

    timer, n = StepTimer(torch.device("cpu")), 200_000
    t0 = time.perf_counter()
    for _ in range(n):
        timer.start(t0)
        timer.mark("data_wait")
        timer.mark("compute")
        timer.mark("comm")
        timer.finish(time.perf_counter(), True)
    per_step = (time.perf_counter() - t0) / n
    step = statistics.median(
        train(
            [
                "--workload",
                "ssd",
                "--synthetic",
                "--batch-size",
                "8",
                "--image-size",
                "128",
                "--steps",
                "30",
                "--loader-threads",
                "1",
            ],
            pin=str(max(os.sched_getaffinity(0))),
        )["per_rank"][0]["step_times_s"]
    )
    add(
        "9 breakdown",
        "images/s kept with per-step timing (1 - timer cost / median step)",
        f"{1 - per_step / step:.5f}",
        f"target >= 0.99; {per_step * 1e6:.1f} us per step vs a {step * 1e3:.0f} ms step (ssd, 1 core)",
    )


# 10. The storage knee: projected vs measured -------------------------------------------------------
def storage_knee(tmp: Path, add) -> None:
    """A blkio throttle at 1.25 x what one rank reads: the projection says 1 GPU; what do 2 ranks get?"""
    from bench.data.generate import GenerateSpec, generate

    src = tmp / "knee-src" / "coco"
    generate(GenerateSpec("coco", src, images=1200, min_side=256, max_side=320, seed=9))
    per_image = sum(p.stat().st_size for p in (src / "images").iterdir()) / 1200
    home = tmp / "knee"
    home.mkdir()
    cfg = home / "cfg.json"
    cfg.write_text(
        json.dumps(
            {
                "workloads": ["ssd"],
                "gpus": [1, 2],
                "dataset_path": str(home / "data"),
                "stage_from": str(src.parent),
                "probe_max_jobs": 2,
                "probe_seconds": 1.0,
                "thresholds": {
                    "min_scaling_efficiency": 0.7,
                    "min_bandwidth_efficiency": 0.0,
                    "max_step_time_spread": 100,
                },
                "train": {
                    "workload": "ssd",
                    "epochs": 1,
                    "batch_size": 8,
                    "image_size": 128,
                    "loader_threads": 1,
                    "sample_interval_s": 0.25,
                    "drop_caches": True,
                },
            }
        )
    )

    def sweep(run_id: str, prefix: str = "") -> pd.DataFrame:
        cmd = [
            str(BIN / "bench"),
            "sweep",
            "--config",
            str(cfg),
            "--results-url",
            f"sqlite:///{home / 'r.db'}",
            "--suite-run-id",
            run_id,
        ]
        if prefix:
            cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
        subprocess.run(cmd, cwd=home, capture_output=True, text=True, timeout=900)
        return pd.read_csv(home / "scalewatch-home" / "runs" / run_id / "results.csv").set_index("gpus")

    free = sweep("free")
    rate = int(1.25 * free.loc[1, "throughput_img_s"] * per_image)
    st = os.stat(home)
    group, prefix = throttle(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", rate)
    try:
        knee = sweep("knee", prefix)
    finally:
        release(group, f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    sized = knee[knee["supported_gpus"].notna()]
    projected = int(sized["supported_gpus"].iloc[0]) if not sized.empty else None
    allowed = rate / per_image
    add(
        "10 knee",
        "2-rank images/s under the throttle / what the throttle allows",
        f"{knee.loc[2, 'throughput_img_s'] / allowed:.3f}",
        f"target within 0.90-1.10; projected supported GPUs {projected} (knee between 1 and 2); "
        f"2-rank bottleneck: {knee.loc[2, 'bottleneck']}; unthrottled 2-rank: {free.loc[2, 'bottleneck'] or 'none'}",
    )


# 11. dataset-only bytes ---------------------------------------------------------------------------
def _evict(paths) -> None:
    for f in paths:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _libraries() -> list[Path]:
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    return [*(site / "torch").rglob("*.so*"), *(site / "nvidia").rglob("*.so*")]


def dataset_bytes_truth(tmp: Path, r: int, add) -> None:
    """Reported / true dataset bytes with the libraries cold too (a fresh node), on local disk and on an
    sshfs mount; the mount's MB/s against a tc limit on the server's link."""
    from bench.data.generate import GenerateSpec, generate
    from bench.data.stage import stage

    sys.path.insert(0, str(ROOT))  # the namespace sshd the tests use: a real network mount
    from tests.infra.ssh_hosts import SshHosts, link_rate_limit, sh

    src = tmp / "truth" / "coco"
    generate(GenerateSpec("coco", src, images=120, min_side=700, max_side=900, seed=6))
    true_bytes = sum(f.stat().st_size for f in (src / "images").iterdir())
    files = [f for f in src.rglob("*") if f.is_file()]
    io = ["--workload", "ssd", "--epochs", "1", "--batch-size", "8", "--sample-interval", "0.25"]
    local = []
    for _ in range(r):
        _evict(_libraries())
        _evict(files)
        local.append(train([*io, "--data", str(src)])["storage"]["first_epoch_bytes_by_source"])
    for source in ("cachestat", "procio"):
        ratio = statistics.median(b[source] for b in local) / true_bytes
        add(
            "11 dataset",
            f"local disk, cold libraries: {source} bytes / true bytes",
            f"{ratio:.4f}",
            "target within 0.98-1.02" if source == "cachestat" else "the process counter: libraries included",
        )
    from bench.metrics.sources.pagecache import SCAN_BUDGET_S, PageCacheSource

    scanner = PageCacheSource(src)
    start = time.perf_counter()
    for _ in range(50):
        scanner.settle()
    per_file = (time.perf_counter() - start) / 50 / len(scanner.files)
    add(
        "11 dataset",
        "page-cache scan cost per dataset file (open, cachestat, close; us)",
        f"{per_file * 1e6:.1f}",
        f"a sample scans at most {SCAN_BUDGET_S * 1e3:g} ms: <= {SCAN_BUDGET_S * 4:.0%} of one core at 4 Hz; "
        f"default dataset (1,536 files) in {1536 * per_file * 1e3:.0f} ms per full pass",
    )
    hosts = SshHosts(tmp / "truth-ssh", count=1, prefix="swbf").start()
    point, export = tmp / "truth-mnt", tmp / "truth-export"
    point.mkdir()
    export.mkdir()
    opts = f"IdentityFile={hosts.client_key},UserKnownHostsFile={hosts.known_hosts},StrictHostKeyChecking=yes"
    try:
        sh("sshfs", f"root@{hosts.ip(0)}:{export}", str(point), "-o", f"{opts},BatchMode=yes,kernel_cache")
        stage(src, point / "coco")
        served = [f for f in (export / "coco").rglob("*") if f.is_file()]
        cold, warm = [], []
        for _ in range(r):
            _evict(served)
            epochs = train([*io[:2], "--epochs", "2", *io[4:], "--data", str(point / "coco")])["epochs"]
            cold.append(epochs[0]["bytes_from_storage"] / true_bytes)
            warm.append(epochs[1]["bytes_from_storage"] / true_bytes)
        add(
            "11 dataset",
            "sshfs mount, cold epoch: cachestat bytes / true bytes",
            f"{statistics.median(cold):.4f}",
            "target within 0.98-1.02",
        )
        add(
            "11 dataset",
            "sshfs mount, warm epoch: cachestat bytes / true bytes",
            f"{statistics.median(warm):.4f}",
            "target ~0 (client page cache, kernel_cache)",
        )
        limit, rates = 3e6, []
        with link_rate_limit([f"{hosts.prefix}0"], "24mbit"):
            for _ in range(r):
                _evict(served)
                rates.append(train([*io, "--data", str(point / "coco")])["epochs"][0]["avg_read_mb_s"])
        add(
            "11 dataset",
            "sshfs mount: epoch-1 MB/s / tc tbf limit (24 mbit = 3 MB/s)",
            f"{statistics.median(rates) / (limit / 1e6):.3f}",
            "target within 0.90-1.10 (TCP/ssh framing inside the limit)",
        )
    finally:
        subprocess.run(["fusermount", "-u", "-z", str(point)], capture_output=True)
        hosts.stop()


def machine() -> str:
    import torch

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, GPU: {gpu}, {platform.platform()}, "
        f"torch {torch.__version__}"
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    p.add_argument("--only", type=int, nargs="*", default=[], help="section numbers to run (default: all)")
    args = p.parse_args()

    def want(section: int) -> bool:
        return not args.only or section in args.only

    from bench.data.generate import GenerateSpec, generate

    r = args.repeats
    tmp = Path(tempfile.mkdtemp(prefix="swbench-"))
    rows: list[tuple[str, str, str, str]] = []  # (section, figure, value, target)

    def add(section, figure, value, target=""):
        rows.append((section, figure, value, target))
        print(f"{section:<14} {figure:<62} {value:>14}  {target}", flush=True)

    data = {}
    for w, kind in KIND.items():
        data[w] = tmp / kind
        generate(GenerateSpec(kind, data[w], images=96, min_side=256, max_side=384, seed=2))
    for w in KIND if want(1) else ():
        dali = median(lambda w=w: loader_rate(w, "dali", data[w], 2, 8, 128), r)
        torch_ = median(lambda w=w: loader_rate(w, "torch", data[w], 2, 8, 128), r)
        add(
            "1 loaders",
            f"{w}: DALI / torch DataLoader images/s (2 threads)",
            f"{dali / torch_:.2f}",
            f"({dali:.0f} vs {torch_:.0f} img/s)",
        )
    common = ["--batch-size", "8", "--image-size", "128", "--steps", "20", "--warmup-steps", "3"]
    for w in KIND if want(2) else ():
        real = median(lambda w=w: train(["--workload", w, "--data", str(data[w]), *common])["images_per_s"], r)
        syn = median(lambda w=w: train(["--workload", w, "--synthetic", *common])["images_per_s"], r)
        add(
            "2 feed",
            f"{w}: real data / --synthetic training images/s",
            f"{real / syn:.3f}",
            f"({real:.0f} vs {syn:.0f} img/s)",
        )
    # Pinned to one core like a rank's slot, each run measured for 8 s: sampler at the default 4 Hz vs off.
    pin = str(max(os.sched_getaffinity(0)))
    long = ["--batch-size", "8", "--image-size", "128", "--steps", "20", "--warmup-steps", "3"]
    long += ["--min-measure-s", "8", "--loader-threads", "1"]
    for w in KIND if want(3) else ():
        p = paired(
            lambda w=w: train(["--workload", w, "--synthetic", *long, "--sample-interval", "0.25"], pin=pin)[
                "images_per_s"
            ],
            lambda w=w: train(["--workload", w, "--synthetic", *long, "--no-sampler"], pin=pin)["images_per_s"],
        )
        add(
            "3 sampler",
            f"{w}: images/s with 4 Hz sampler / without",
            f"{p['ratio']:.3f}",
            describe(p, "target >= 0.99"),
        )

    if want(4):
        storage_truth(tmp, r, add)
    for w in KIND if want(5) else ():
        p = paired(
            lambda w=w: train(["--workload", w, "--synthetic", *long, "--no-sampler"], pin=pin)["images_per_s"],
            lambda w=w: horovod_loop_pinned(w, 8, 128, pin),
        )
        add(
            "5 peers",
            f"{w}: harness --synthetic / Horovod synthetic-benchmark loop (1 core each)",
            f"{p['ratio']:.3f}",
            describe(p, "target >= 0.95"),
        )
    if want(5):
        add("5 peers", "harness MB/s vs dlio-benchmark", "not run", "dlio-benchmark 2.0.0 needs tensorflow+torchvision")
    if want(6):
        orchestration(tmp, r, add)
    if want(7):
        add(
            "7 GPU",
            "GPU table, SSD300 R50 img/s per GPU vs NVIDIA (663 img/s A100)",
            "not run",
            "no GPU lent to this task",
        )
    if want(8):
        default_bound(tmp, add)
    if want(9):
        timing_overhead(add)
    if want(10):
        storage_knee(tmp, add)
    if want(11):
        dataset_bytes_truth(tmp, r, add)
    if want(12):
        detection(add)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    lines = [
        "# Benchmark results\n",
        f"Measured {stamp} on: {machine()}. Medians over {r} repeats.\n",
        "| section | figure | value | target / detail |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    args.out.write_text("\n".join(lines) + "\n\nRe-run: `scripts/bench.sh`.\n")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
