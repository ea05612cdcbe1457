"""Staging where the storage is (`stage_on: node`): generation, staging and the manifest check run on a
compute node through the suite's launcher, as its ranks and probe do, so the Airflow worker need not
mount the store under test. The node runs `python -m bench.suite.stage_node` and prints what was
staged as JSON; an error there fails the task naming the node. A workload file named by its path must
be at that path on the node too (a shared folder, as the run folder is)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, RootModel, StringConstraints

from bench.config.models import SweepConfig
from bench.config.types import NAME_RE, PATH_RE
from bench.launch.environment import python_module
from bench.suite.staging import StagingSpec


def node_argv(spec: StagingSpec, python: str) -> list[str]:
    """The node's command: the datasets' settings only (no alert targets or keys in a node's argv); `python
    -P`, as every Python the suite starts (bench.launch.environment), started where a node probe is."""
    argv = python_module(python, "bench.suite.stage_node", "--dataset-path", str(spec.dataset_path))
    argv += ["--images", str(spec.dataset_images), "--seed", str(spec.seed)]
    for workload in spec.workloads:
        argv += ["--workload", workload]
    return argv + (["--stage-from", str(spec.stage_from)] if spec.stage_from else [])


class StagedDataset(BaseModel):
    """One workload's staged dataset as the node reports it (bench.suite.staging.stage_one, stage_records)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    path: Annotated[str, StringConstraints(pattern=PATH_RE.pattern, max_length=4096)]
    files: int = Field(ge=0, le=2**40)
    bytes: int = Field(ge=0, le=2**62)
    copied: int = Field(ge=0, le=2**40)
    skipped: int = Field(ge=0, le=2**40)


WorkloadName = Annotated[str, StringConstraints(pattern=NAME_RE.pattern)]


class StagingDoc(RootModel[dict[WorkloadName, StagedDataset]]):
    """A node's staging result: each workload's staged dataset, nothing else (issue 48: it was taken as
    any JSON)."""


def stage_on_node(cfg: SweepConfig, launcher=None, env: dict[str, str] | None = None) -> dict:
    """Each workload's dataset staged on the suite's first node; raises DatasetError (or ProbeError, for a
    node that printed no result) naming the node."""
    from bench.launch.registry import suite_launcher
    from bench.storage.fio_probe import ProbeError
    from bench.suite.node_probe import node_doc, suite_nodes
    from bench.suite.plan import workload_names

    nodes = suite_nodes(cfg, launcher or suite_launcher(cfg), env)
    argv = node_argv(StagingSpec.of(cfg), nodes.python)
    out = nodes.run(1, lambda share: argv, float(cfg.where.time_limit_s))[0]
    staged = node_doc(out, "staging", StagingDoc)
    expected = set(workload_names(cfg.training.workloads))
    if set(staged) != expected:
        raise ProbeError(
            f"staging on node {out.node}: result names workloads {sorted(staged)}, the suite staged {sorted(expected)}"
        )
    return staged


def main(argv: list[str] | None = None) -> int:
    from bench.errors import BenchError
    from bench.storage.fio_probe import node_name
    from bench.suite.staging import stage_here

    p = argparse.ArgumentParser(prog="python -m bench.suite.stage_node")
    p.add_argument("--dataset-path", type=Path, required=True)
    p.add_argument("--workload", action="append", required=True, help="a built-in's name or a workload file")
    p.add_argument("--images", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--stage-from", type=Path)
    args = p.parse_args(argv)
    try:
        # the datasets' settings only, validated as the worker validated them (workload refs included)
        spec = StagingSpec(
            workloads=args.workload,
            dataset_path=args.dataset_path,
            dataset_images=args.images,
            seed=args.seed,
            stage_from=args.stage_from,
        )
        out = stage_here(spec)
    except (BenchError, OSError, ValueError) as error:
        print(f"{node_name()}: {error}", file=sys.stderr)
        return 2
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
