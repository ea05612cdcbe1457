"""The projection: each workload's measured scales beside the model's figure on this machine, then the
requested scales on the target fabric."""

from __future__ import annotations

from bench.analysis.cluster import Cluster
from bench.analysis.projection.inputs import Given, WorkloadInputs, machine_at, no_ceiling, target_fabric
from bench.analysis.projection.model import measured_row, project_scale


def project(
    inputs: list[WorkloadInputs], gpus: list[int], cluster: Cluster | None, given: Given, where: str
) -> list[dict]:
    """Measured scales (each beside the model's figure on this machine) then the requested scales, per workload.

    A run without a measured allreduce and no --link or cluster has nothing to carry the gradients at 2+ GPUs:
    refused naming allreduce_s."""
    out: list[dict] = []
    for item in inputs:
        target = target_fabric(item, cluster, given, where)
        target.check_fits(gpus)
        if any(n > 1 for n in gpus) and target.flat is None and target.cluster is None:
            raise no_ceiling(
                f"{where} (workload {item.ceilings.workload})",
                "allreduce_s",
                "--allreduce-s (with --allreduce-gpus), --link or --cluster",
                item.allreduce_s_detail,
            )
        rows = [measured_row(item.ceilings, m, machine_at(item, m, given), given.algorithm) for m in item.measured]
        rows += [project_scale(item.ceilings, n, target, given.algorithm) for n in gpus]
        out += sorted(rows, key=lambda r: (r["gpus"], r["kind"] != "measured"))
    return out
