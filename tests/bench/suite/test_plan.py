"""What a suite run launches: each scale above one rank followed by its node ceiling, which reads the
page cache rather than the store under test (a throttled store must not slow the ceiling too)."""

from __future__ import annotations

from pathlib import Path

from bench.config.models import SweepConfig, TrainConfig
from bench.suite.plan import INDEPENDENT, run_matrix, run_spec
from tests.infra.configs import changed


def cfg(tmp_path: Path, **over) -> SweepConfig:
    return SweepConfig(
        workloads=("ssd",),
        gpus=(1, 2, 4),
        dataset_path=tmp_path,
        train=TrainConfig(**{"workload": "ssd", "data": tmp_path / "coco", "steps": 4} | over),
        output_dir=tmp_path / "out",
    )


def test_each_scale_above_one_rank_is_followed_by_its_node_ceiling(tmp_path):
    assert run_matrix(cfg(tmp_path)) == [
        {"workload": "ssd", "gpus": 1},
        {"workload": "ssd", "gpus": 2},
        {"workload": "ssd", "gpus": 2, "variant": INDEPENDENT},
        {"workload": "ssd", "gpus": 4},
        {"workload": "ssd", "gpus": 4, "variant": INDEPENDENT},
    ]
    assert all("variant" not in m for m in run_matrix(changed(cfg(tmp_path), ceilings=False)))


def test_the_node_ceiling_reads_the_page_cache_and_runs_no_collective(tmp_path):
    scale = run_spec(cfg(tmp_path), "r", "ssd", 2).train
    ceiling = run_spec(cfg(tmp_path), "r", "ssd", 2, INDEPENDENT).train
    assert (scale.independent, scale.warm_cache, scale.drop_caches) == (False, False, True)
    assert (ceiling.independent, ceiling.warm_cache, ceiling.drop_caches) == (True, True, False)
    assert ceiling.data == scale.data
    assert TrainConfig.model_validate_json(ceiling.model_dump_json(exclude_unset=True)) == ceiling


def test_a_synthetic_suites_node_ceiling_has_nothing_to_warm(tmp_path):
    ceiling = run_spec(cfg(tmp_path, synthetic=True, data=None), "r", "ssd", 2, INDEPENDENT).train
    assert ceiling.independent and ceiling.synthetic and not ceiling.warm_cache


def test_an_emulated_workload_searches_doubling_counts_within_the_slots_and_a_real_model_does_not(tmp_path):
    """The AU search's counts are fixed at plan time (the DAG expands one task per scale): the suite's
    gpus plus 1, 2, 4, ... up to the nodes' slots (and the slots themselves), capped by
    au_search_max_ranks, off at 0; a real model keeps the suite's counts."""

    def scales(workload: str, hosts: tuple[str, ...], **over) -> list[int]:
        ssh = {"launcher": "ssh", "hosts": hosts} if hosts else {}
        base = changed(cfg(tmp_path), workloads=("ssd", "retinanet-b200"), gpus=(1, 2), ceilings=False, **over, **ssh)
        return [m["gpus"] for m in run_matrix(base) if m["workload"] == workload]

    assert scales("retinanet-b200", ("a:1", "b:1")) == [1, 2]  # two slots: nothing beyond the suite's counts
    assert scales("retinanet-b200", ("a:4", "b:4")) == [1, 2, 4, 8]
    assert scales("retinanet-b200", ("a:4", "b:2")) == [1, 2, 4, 6]  # the slots themselves end the search
    assert scales("retinanet-b200", ("a:4", "b:4"), au_search_max_ranks=4) == [1, 2, 4]
    assert scales("retinanet-b200", ("a:4", "b:4"), au_search_max_ranks=0) == [1, 2]
    assert scales("ssd", ("a:4", "b:4")) == [1, 2]
    slurm = {"launcher": "slurm", "ranks_per_node": 4}  # no hosts: the nodes a job gets are not known
    assert scales("retinanet-b200", (), **slurm) == [1, 2]
