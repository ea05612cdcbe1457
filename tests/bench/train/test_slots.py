"""Slot planning: disjoint slices per rank, GPU ranks on their GPU's NUMA cores, refusals that name the node."""

from __future__ import annotations

import pytest

from bench.train.slots import SlotError, check_capacity, parse_cpulist, plan_slot

# Two NUMA nodes of 8 cores, two GPUs on each (the shape of a 4-GPU server).
FOUR_GPUS = [(0, list(range(0, 8))), (0, list(range(0, 8))), (1, list(range(8, 16))), (1, list(range(8, 16)))]


def test_cpu_ranks_get_disjoint_slices_of_cpus_per_rank():
    cpus = list(range(8))
    slots = [plan_slot("n1", r, 4, 2, False, allowed=cpus, gpus=[]) for r in range(4)]
    assert [s.cpus for s in slots] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert all(s.bound_by == "scalewatch" and not s.oversubscribed and s.gpu is None for s in slots)


def test_a_rank_without_a_slot_is_refused_naming_the_node_unless_oversubscribed():
    with pytest.raises(SlotError, match=r"host n1: local rank 2 has no slot: 2 usable cores give 2 slot"):
        plan_slot("n1", 2, 3, 1, False, allowed=[0, 1], gpus=[])
    shared = plan_slot("n1", 2, 3, 1, True, allowed=[0, 1], gpus=[])
    assert shared.cpus == (0,) and shared.oversubscribed


def test_gpu_ranks_own_their_gpu_and_split_its_numa_cores():
    slots = [plan_slot("g1", r, 4, 1, False, allowed=list(range(16)), gpus=FOUR_GPUS) for r in range(4)]
    assert [s.gpu for s in slots] == [0, 1, 2, 3]
    assert [s.numa_node for s in slots] == [0, 0, 1, 1]
    assert [s.cpus for s in slots] == [
        tuple(range(0, 4)),
        tuple(range(4, 8)),
        tuple(range(8, 12)),
        tuple(range(12, 16)),
    ]
    with pytest.raises(SlotError, match=r"host g1: local rank 4 has no GPU of its own \(4 GPU"):
        plan_slot("g1", 4, 5, 1, False, allowed=list(range(16)), gpus=FOUR_GPUS)


def test_a_task_the_scheduler_already_bound_keeps_its_cores():
    slot = plan_slot("node1", 1, 2, 2, False, allowed=[6, 7], gpus=[], scheduler_bound=True)
    assert slot.cpus == (6, 7) and slot.bound_by == "slurm"


def test_capacity_check_and_cpulist_parsing():
    check_capacity("n1", 2, 1, False, [0, 1])
    with pytest.raises(SlotError, match=r"host n1: 3 ranks asked, but it has 2 slot\(s\) \(2 usable cores"):
        check_capacity("n1", 3, 1, False, [0, 1])
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
