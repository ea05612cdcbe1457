"""Slot planning: disjoint slices per rank, GPU ranks on their GPU's NUMA cores, refusals that name the node."""

from __future__ import annotations

import pytest

from bench.slots import parse_cpulist
from bench.train.slots import SlotError, check_capacity, plan_slot

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


def test_contention_names_ranks_cores_gpus_and_threads():
    from bench.slots import Peer, contention, contention_summary

    peers = [
        Peer(0, "n1", (0, 1), 2, None),
        Peer(1, "n1", (1, 2), 1, None),
        Peer(2, "n2", (0, 1), 2, None),  # another host: its cores are its own
        Peer(3, "n1", (3,), 1, None),
    ]
    got = contention(peers)
    assert got[0]["shared_with"] == [1] and got[1]["shared_with"] == [0] and got[3]["shared_with"] == []
    assert got[0]["contention"] == "ranks 0 and 1 on n1 share cores 1"
    assert got[2] == {"shared_with": [], "oversubscribed": False, "contention": ""}
    # disjoint cores, but more threads than cores: oversubscribed, nobody shares
    threads = contention([Peer(0, "n1", (0,), 4, None), Peer(1, "n1", (1,), 1, None)])
    assert threads[1]["shared_with"] == [] and threads[1]["oversubscribed"]
    assert threads[1]["contention"] == "ranks 0, 1 on n1 run 5 threads on 2 core(s) 0-1"
    gpu = contention([Peer(0, "g", (0,), 1, "GPU-a"), Peer(1, "g", (1,), 1, "GPU-a"), Peer(2, "g", (2,), 1, "GPU-b")])
    assert gpu[0]["shared_with"] == [1] and gpu[2]["shared_with"] == []
    assert gpu[1]["contention"] == gpu[0]["contention"] == "ranks 0 and 1 on g share GPU GPU-a"
    # the suite's own oversubscribe: marked, but no contention note (that run is judged as oversubscribed)
    planned = contention([Peer(0, "n", (0,), 1, None, True), Peer(1, "n", (0,), 1, None, True)])
    assert planned[0]["shared_with"] == [1] and planned[0]["oversubscribed"] and planned[0]["contention"] == ""
    assert contention_summary([{"contention": got[0]["contention"]}, {"contention": got[1]["contention"]}]) == (
        "ranks 0 and 1 on n1 share cores 1"
    )


def test_bind_auto_splits_a_shared_set_by_rank_order():
    from bench.slots import Peer
    from bench.train.slots import auto_slot

    peers = [Peer(r, "n1", (0, 1, 2, 3), 4, None) for r in (4, 5)] + [Peer(6, "n2", (0, 1, 2, 3), 4, None)]
    assert auto_slot(peers[0], peers) == (0, 1) and auto_slot(peers[1], peers) == (2, 3)
    assert auto_slot(peers[2], peers) == (0, 1, 2, 3)  # alone on its host: keeps what it has
    crowded = [Peer(r, "n", (0, 1), 2, None) for r in range(3)]
    assert [auto_slot(p, crowded) for p in crowded] == [(0,), (1,), (0,)]  # more ranks than cores: shared


def test_block_plan_places_ranks_like_horovod():
    from bench.launch.rendezvous import block_plan, host_plan

    hosts = [("a", 2), ("b", 3)]
    ours = block_plan(hosts, 4)
    theirs = host_plan(hosts, 4)
    fields = ("hostname", "rank", "local_rank", "cross_rank", "size", "local_size", "cross_size")
    assert [tuple(getattr(s, f) for f in fields) for s in ours] == [
        tuple(getattr(s, f) for f in fields) for s in theirs
    ]
    assert [s.node for s in ours] == [0, 0, 1, 1]
    assert len(theirs) == 4  # Horovod's planner alone fills all 5 slots: a rank nobody asked for
    full = [("a", 2), ("b", 3)]
    assert [tuple(getattr(s, f) for f in fields) for s in block_plan(full, 5)] == [
        tuple(getattr(s, f) for f in fields) for s in host_plan(full, 5)
    ]


def test_slot_facts_live_low_and_train_slots_keeps_no_copy_of_them():
    """The slot facts are defined once, in bench.slots (the summary and the verdict read them without the
    training side); bench.train.slots uses them from there and re-exports none for its old importers
    (issue 52: only tests kept those names alive)."""
    import bench.slots
    import bench.train.slots

    facts = ("Peer", "contention", "contention_summary", "cpu_ranges", "parse_cpulist")
    for name in facts:
        assert getattr(bench.slots, name).__module__ == "bench.slots", name
        held = getattr(bench.train.slots, name, None)
        assert held is None or held is getattr(bench.slots, name), f"bench.train.slots.{name} is a copy"
    assert not {"contention", "contention_summary", "cpu_ranges"} & set(vars(bench.train.slots)), "re-exported"
