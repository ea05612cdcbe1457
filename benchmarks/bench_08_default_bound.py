"""Benchmark section 8: the embedded default's bound, bench sweep with the embedded default run back to back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from runner import (
    BIN,
    Context,
    main_for,
)

NUMBER = 8
TITLE = "default bound"


def default_sweep_efficiencies(tmp: Path, runs: int) -> tuple[dict[str, dict[str, list[float]]], list[str], list[str]]:
    """`bench sweep` with the embedded default, `runs` times: each sweep is one interleaved 1 -> 2 rank pair
    per workload (with its node ceiling) through the same code path as README command 1 (local launcher,
    rank slots, 10 s windows). Per workload: the judged (ideal), linear and independent efficiencies;
    each sweep's verdict; and for each sweep that did not pass, what failed (expectation, workload, GPUs)."""
    home = tmp / "bound"
    home.mkdir(exist_ok=True)
    found: dict[str, dict[str, list[float]]] = {}
    verdicts: list[str] = []
    why: list[str] = []
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
        outcome = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
        verdicts.append(outcome["verdict"])
        if outcome["verdict"] != "PASSED":
            named = [
                f"{f.get('expectation', '?')} {f.get('workload', '?')}@{f.get('gpus', '?')}"
                + (f" ({f['reason'][:80]})" if f.get("reason") else "")
                for f in outcome.get("failures", [])
            ] + [
                f"inconclusive {x.get('workload')}@{x.get('gpus')}: {x.get('reason', '')[:80]}"
                for x in outcome.get("inconclusive", [])
            ]
            why.append(f"sweep {i}: " + "; ".join(named))
        folder = home / "scalewatch-home" / "runs" / f"bound-{i}"
        frame = pd.read_csv(folder / "results.csv")
        repeated = sorted(p.name for p in folder.glob("*-repeat"))  # suspected regressions run again
        if repeated:
            why.append(f"sweep {i} ({outcome['verdict']}): run again under the regression floor: {', '.join(repeated)}")
        for row in frame[frame["gpus"] == 2].to_dict("records"):
            mine = found.setdefault(row["workload"], {"judged": [], "linear": [], "independent": []})
            mine["judged"].append(float(row["scaling_efficiency"]))
            mine["linear"].append(float(row.get("linear_efficiency", row["scaling_efficiency"])))
            mine["independent"].append(float(row.get("independent_efficiency", float("nan"))))
        print(
            f"  bound run {i}: {verdicts[-1]}; "
            + (f"{why[-1]}; " if verdicts[-1] != "PASSED" else "")
            + ", ".join(f"{w} {v['judged'][-1]:.3f} (linear {v['linear'][-1]:.3f})" for w, v in found.items()),
            flush=True,
        )
    return found, verdicts, why


def default_bound(tmp: Path, add, runs: int = 20) -> None:
    """README command 1's own question: on a healthy machine, how many of `runs` sweeps pass (target 19 of 20)."""
    from scipy import stats

    found, verdicts, why = default_sweep_efficiencies(tmp, runs)
    passed = verdicts.count("PASSED")
    low, high = stats.binomtest(passed, len(verdicts)).proportion_ci(0.95) if verdicts else (float("nan"),) * 2
    add(
        "8 bound",
        "embedded default sweeps PASSED (healthy machine, judged against its ideal)",
        f"{passed} of {len(verdicts)}",
        f"target >= 19 of 20; 95% CI of the pass rate [{low:.2f}, {high:.2f}]; others: " + (" | ".join(why) or "none"),
    )
    for workload, series in found.items():
        for kind, values in series.items():
            a = np.array([v for v in values if np.isfinite(v)])  # a sweep whose scale had no figure: left out
            h = stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a)) if len(a) > 1 else float("nan")
            add(
                "8 bound",
                f"{workload}: 1 -> 2 ranks {kind} efficiency",
                f"{np.median(a):.3f}",
                f"mean 95% CI [{a.mean() - h:.3f}, {a.mean() + h:.3f}]; min {a.min():.3f}, max {a.max():.3f}; "
                f"{len(a)} of {len(values)} sweeps with a figure",
            )


def run(ctx: Context) -> None:
    default_bound(ctx.tmp, ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
