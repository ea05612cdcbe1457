"""scalewatch benchmarks: ratios measured side by side, medians over repeats (asv's shape: one
`bench_NN_*.py` module per section, each runnable alone; this runner runs any of them and gathers
their rows into benchmarks/RESULTS.md, keeping the rows of sections it did not run).

Not a test: numbers go to stdout and RESULTS.md with the machine they came from.
Usage: python benchmarks/runner.py [--repeats N] [--only 1 4 12]   or   python benchmarks/bench_04_storage_truth.py
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
KIND = {"ssd": "coco", "deeplabv3plus": "segmentation"}
BLKIO = Path("/sys/fs/cgroup/blkio")
RESULTS = HERE / "RESULTS.md"


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


def ratio_interval(ratios: list[float]) -> tuple[float, float, float]:
    """(geometric mean, 95% t-interval low, high) of repeated ratios (one ratio: no interval, nan)."""
    from scipy import stats

    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


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


@dataclass
class Context:
    """What every section gets: a scratch folder, the repeat count, and `add` for its result rows."""

    tmp: Path
    repeats: int
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # (section, figure, value, target)

    def add(self, section: str, figure: str, value: str, target: str = "") -> None:
        self.rows.append((section, figure, value, target))
        print(f"{section:<14} {figure:<62} {value:>14}  {target}", flush=True)

    @cached_property
    def data(self) -> dict[str, Path]:
        """Small generated datasets (96 images per workload) the loader and feed sections share."""
        from bench.data.generate import GenerateSpec, generate

        out = {}
        for w, kind in KIND.items():
            out[w] = self.tmp / kind
            generate(GenerateSpec(kind, out[w], images=96, min_side=256, max_side=384, seed=2))
        return out


def sections() -> dict[int, object]:
    """Every bench_NN_*.py beside this file, by section number."""
    sys.path.insert(0, str(HERE))
    found = {}
    for path in sorted(HERE.glob("bench_[0-9]*_*.py")):
        module = importlib.import_module(path.stem)
        found[module.NUMBER] = module
    return found


def _section_of(row_section: str) -> int | None:
    head = row_section.split(" ", 1)[0]
    return int(head) if head.isdigit() else None


class Skipped(RuntimeError):
    """A section that cannot run here (what it needs is missing, the message says what): its earlier rows
    are kept as they are, not dropped as if it had run and measured nothing."""


class UnscriptedRows(RuntimeError):
    """RESULTS.md holds a row that no section module writes (a hand-edited or orphaned figure)."""


def _pattern(node: ast.expr) -> str:
    """A regex for the text an `add(...)` argument makes: literal parts as they are, anything else any text."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else r"[^|]+?" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pattern(node.left) + _pattern(node.right)
    return r"[^|]+?"


def figures_of(path: Path) -> list[tuple[re.Pattern, re.Pattern]]:
    """(section label, figure) patterns of each `add(section, figure, value, ...)` call in a section module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        name = getattr(node, "func", None)
        name = getattr(name, "attr", getattr(name, "id", None))
        if isinstance(node, ast.Call) and name == "add" and len(node.args) >= 2:
            out.append((re.compile(_pattern(node.args[0])), re.compile(_pattern(node.args[1]))))
    return out


def unscripted(text: str, here: Path = HERE) -> list[str]:
    """Each result row of a RESULTS.md text that no `bench_NN_*.py` writes: its section has no module, or
    no `add` call of that module makes its section label and figure. [] when every row has its script."""
    modules = {}
    for path in here.glob("bench_[0-9]*_*.py"):
        number = re.search(r"^NUMBER = (\d+)$", path.read_text(), flags=re.MULTILINE)
        if number:
            modules[int(number.group(1))] = path
    wrong = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if not line.startswith("|") or cells[0] in ("section", "figure") or set(cells[0]) <= {"-", " "}:
            continue
        number = _section_of(cells[0])
        if number not in modules or len(cells) != 4:
            wrong.append(f"{line[:160]} (no benchmarks/bench_NN_*.py writes a row of section {cells[0]!r})")
        elif not any(a.fullmatch(cells[0]) and f.fullmatch(cells[1]) for a, f in figures_of(modules[number])):
            wrong.append(f"{line[:160]} ({modules[number].name} writes no such section label and figure)")
    return wrong


def write_results(rows: list[tuple[str, str, str, str]], ran: set[int], repeats: int, out: Path) -> None:
    """RESULTS.md: this run's rows for the sections it ran, the file's earlier rows (and their provenance
    notes, each paragraph kept whole) for the others, and one note saying when and where this run
    measured its sections. Everything from the first `## ` heading on (a section's own write-up and
    table) is kept as it is."""
    head, tail = "", ""
    if out.exists():
        text = out.read_text()
        heading = re.search(r"^## ", text, flags=re.MULTILINE)
        head, tail = (text[: heading.start()], text[heading.start() :]) if heading else (text, "")
    notes: list[str] = []
    kept: list[str] = []
    for paragraph in head.split("\n\n"):
        lines = [line for line in paragraph.splitlines() if line.strip()]
        if not lines or lines[0].startswith(("# ", "Re-run:")):
            continue
        if not all(line.startswith("|") for line in lines):
            measured = re.match(r"Sections? ([\d, ]+) measured", lines[0])
            named = {int(n) for n in re.findall(r"\d+", measured.group(1))} if measured else set()
            if not (named and named <= ran):  # a note of sections this run measured again is replaced
                notes.append("\n".join(lines))
            continue
        for line in lines:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and _section_of(cells[0]) not in (None, *ran):
                kept.append(line)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    notes.append(
        f"Sections {', '.join(map(str, sorted(ran)))} measured {stamp} on: {machine()}; medians over {repeats} repeats."
    )
    new = [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    merged = sorted(kept + new, key=lambda line: _section_of(line.strip("| ").split(" | ")[0]) or 0)
    table = ["| section | figure | value | target / detail |", "| --- | --- | --- | --- |", *merged]
    rerun = "Re-run: `scripts/bench.sh` (all) or `python benchmarks/bench_NN_*.py` (one section)."
    body = "\n\n".join(["# Benchmark results", *notes, "\n".join(table), rerun]) + "\n"
    text = body + ("\n" + tail if tail else "")
    wrong = unscripted(text)
    if wrong:  # RESULTS.md holds what the section modules write, and nothing else
        raise UnscriptedRows("rows without a script in RESULTS.md:\n" + "\n".join(wrong))
    out.write_text(text)


def run(numbers: list[int], repeats: int, out: Path = RESULTS) -> int:
    found = sections()
    unknown = [n for n in numbers if n not in found]
    if unknown:
        print(f"no benchmark section {unknown}; sections: {sorted(found)}", file=sys.stderr)
        return 2
    ctx = Context(Path(tempfile.mkdtemp(prefix="swbench-")), repeats)
    ran = set()
    try:
        for n in numbers or sorted(found):
            try:
                found[n].run(ctx)
            except Skipped as skipped:
                print(f"section {n} skipped (its earlier rows kept): {skipped}", file=sys.stderr)
                continue
            ran.add(n)
    finally:
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    if not ran:
        return 1
    write_results(ctx.rows, ran, repeats, out)
    print(f"written to {out}")
    return 0


def main_for(number: int) -> int:
    """A section module run alone: `python benchmarks/bench_NN_x.py [--repeats N]`."""
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    return run([number], p.parse_args().repeats)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--only", type=int, nargs="*", default=[], help="section numbers to run (default: all)")
    args = p.parse_args()
    return run(args.only, args.repeats, args.out)


if __name__ == "__main__":
    sys.exit(main())
