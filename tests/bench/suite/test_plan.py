"""What a suite run launches: each scale above one rank followed by its node ceiling, which reads the
page cache rather than the store under test (a throttled store must not slow the ceiling too)."""

from __future__ import annotations

from pathlib import Path

from bench.config import SweepConfig, TrainConfig
from bench.suite.plan import INDEPENDENT, run_matrix, run_spec


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
    assert all("variant" not in m for m in run_matrix(cfg(tmp_path).model_copy(update={"ceilings": False})))


def test_the_node_ceiling_reads_the_page_cache_and_runs_no_collective(tmp_path):
    scale = run_spec(cfg(tmp_path), "r", "ssd", 2).train
    ceiling = run_spec(cfg(tmp_path), "r", "ssd", 2, INDEPENDENT).train
    assert (scale.independent, scale.warm_cache, scale.drop_caches) == (False, False, True)
    assert (ceiling.independent, ceiling.warm_cache, ceiling.drop_caches) == (True, True, False)
    assert ceiling.data == scale.data
    assert "--independent" in ceiling.to_argv() and "--warm-cache" in ceiling.to_argv()


def test_a_synthetic_suites_node_ceiling_has_nothing_to_warm(tmp_path):
    ceiling = run_spec(cfg(tmp_path, synthetic=True, data=None), "r", "ssd", 2, INDEPENDENT).train
    assert ceiling.independent and ceiling.synthetic and not ceiling.warm_cache
