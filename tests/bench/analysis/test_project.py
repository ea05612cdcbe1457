"""The projection model against hand-computed values: ring vs tree, one node vs many, the storage knee,
the measured overlap, the described cluster and its unit strings, and the reader's refusals."""

import math

import pandas as pd
import pytest

from bench.analysis.cluster import Cluster, rate_bytes_s, seconds, size_bytes
from bench.analysis.projection.allreduce import Link, bus_bandwidth, measured_link, ring_allreduce_s, tree_allreduce_s
from bench.analysis.projection.inputs import Given, inputs_from_run
from bench.analysis.projection.model import BOUND_BY, Ceilings, Fabric, project_scale
from bench.analysis.projection.project import project
from bench.config.types import parse
from bench.errors import ConfigError, ResultsInputError

LINK = Link(bus_bytes_s=10e9, latency_s=5e-6, span="flat", source="test")


def test_ring_and_tree_by_hand():
    # 1 GB over 8 ranks at 10 GB/s bus: (S/B) x 2(n-1)/n = 0.1 x 14/8 = 0.175 s; ring 2(n-1) = 14 hops, tree 2x3
    assert ring_allreduce_s(1e9, 8, LINK) == pytest.approx(14 * 5e-6 + 0.175)
    assert tree_allreduce_s(1e9, 8, LINK) == pytest.approx(6 * 5e-6 + 0.175)
    # 5 ranks: the tree is ceil(log2 5) = 3 deep, so 6 hops; the ring 8
    assert tree_allreduce_s(1e9, 5, LINK) == pytest.approx(6 * 5e-6 + 0.1 * 8 / 5)
    assert ring_allreduce_s(1e9, 5, LINK) == pytest.approx(8 * 5e-6 + 0.1 * 8 / 5)
    # buckets pay the latency each, the bytes once
    assert ring_allreduce_s(1e9, 8, LINK, buckets=4) == pytest.approx(4 * 14 * 5e-6 + 0.175)
    # one rank reduces with nobody
    assert ring_allreduce_s(1e9, 1, LINK) == 0 == tree_allreduce_s(1e9, 1, LINK)
    # at 1024 ranks the ring's latency dominates a small message; the tree's grows with log2 n
    small = 1e6
    assert ring_allreduce_s(small, 1024, LINK) == pytest.approx(2046 * 5e-6 + 1e-4 * 2046 / 1024)
    assert tree_allreduce_s(small, 1024, LINK) == pytest.approx(20 * 5e-6 + 1e-4 * 2046 / 1024)


def test_bus_bandwidth_is_nccl_tests_busbw_and_inverts_the_model():
    # algbw 1e9 / 0.15 s, x 2(n-1)/n = 1.5 at 4 ranks: 10 GB/s
    assert bus_bandwidth(1e9, 4, 0.15) == pytest.approx(1e10)
    link = measured_link(1e9, 4, 0.15, latency_s=0.0, buckets=1, algorithm="ring")
    assert link.bus_bytes_s == pytest.approx(1e10)
    assert ring_allreduce_s(1e9, 4, link) == pytest.approx(0.15)
    # with a latency the hops come off first: 0.15 - 6 x 1 ms leaves 0.144 s for the bytes
    link = measured_link(1e9, 4, 0.15, latency_s=1e-3, buckets=1, algorithm="ring")
    assert link.bus_bytes_s == pytest.approx(1e9 * 1.5 / 0.144)
    with pytest.raises(ConfigError, match="--latency"):
        measured_link(1e9, 4, 0.15, latency_s=0.1, buckets=1, algorithm="ring")


CLUSTER = {
    "name": "c",
    "nodes": 4,
    "gpus_per_node": 8,
    "intra_node_link": "100GB/s",
    "inter_node_link": "200Gbit",
    "latency": "2us",
    "inter_node_latency": "10us",
    "storage_ceiling": "20GB/s",
}


def test_one_node_uses_the_intra_node_link_and_many_the_slower_of_both():
    fabric = Fabric(cluster=parse(Cluster, CLUSTER), storage_bytes_s=20e9)
    inside, across = fabric.link(8), fabric.link(16)
    assert (inside.bus_bytes_s, inside.span) == (100e9, "intra_node") and inside.latency_s == pytest.approx(2e-6)
    assert (across.bus_bytes_s, across.span) == (25e9, "inter_node")  # 200 Gbit = 25 GB/s
    assert across.latency_s == pytest.approx(10e-6)
    assert (fabric.nodes(8), fabric.nodes(9), fabric.nodes(32)) == (1, 2, 4)
    # a network faster than one GPU's NVLink share still leaves the GPU's own link as the bound
    fast = Fabric(cluster=parse(Cluster, {**CLUSTER, "inter_node_link": "1TB/s"}), storage_bytes_s=1.0)
    assert fast.link(16).bus_bytes_s == 100e9
    # the same 1 GB costs 4x more per byte once it leaves the node
    assert ring_allreduce_s(1e9, 16, across) - 30 * 10e-6 == pytest.approx(1e9 / 25e9 * 30 / 16)


def test_more_gpus_than_the_cluster_holds_is_refused_naming_the_count():
    fabric = Fabric(cluster=parse(Cluster, CLUSTER))
    fabric.check_fits([1, 32])
    with pytest.raises(ConfigError, match=r"--gpus: 33 GPUs exceed .* nodes 4 x gpus_per_node 8 = 32"):
        fabric.check_fits([8, 33])


CEIL = Ceilings(
    workload="ssd",
    one_rank_img_s=100.0,
    compute_img_s=100.0,
    compute_basis="one-rank",
    batch_size=32,
    allreduce_bytes=1e8,
    buckets=1,
    bytes_per_image=1e5,
    exposed_fraction=0.5,
    exposed_source="test",
)
FLAT = Fabric(flat=Link(10e9, 0.0, "flat", "test"), storage_bytes_s=1e9)


def test_projection_by_hand_compute_bound():
    row = project_scale(CEIL, 8, FLAT, "ring")
    # compute 32/100 = 0.32 s; allreduce 1e8/1e10 x 14/8 = 0.0175 s, half exposed
    assert row["allreduce_s"] == pytest.approx(0.0175)
    assert row["exposed_comm_s"] == pytest.approx(0.00875)
    assert row["images_per_s"] == pytest.approx(8 * 32 / 0.32875)
    assert row["efficiency"] == pytest.approx(32 / 0.32875 / 100)
    assert row["storage_utilisation"] == pytest.approx(8 * 32 / 0.32875 * 1e5 / 1e9)
    assert (row["bound_by"], row["kind"]) == ("compute", "projection") and row["bound_by"] in BOUND_BY
    one = project_scale(CEIL, 1, FLAT, "ring")
    assert (one["images_per_s"], one["efficiency"], one["exposed_comm_s"]) == (100.0, 1.0, 0.0)


def test_storage_knee_by_hand():
    # storage feeds 1e9 / 1e5 = 10,000 img/s; the GPUs ask 32 / 0.32875.. img/s each, so the knee is past 102
    def demand(n: int) -> float:
        return n * 32 / (0.32 + 0.5 * 1e8 / 1e10 * 2 * (n - 1) / n)

    below, above = project_scale(CEIL, 102, FLAT), project_scale(CEIL, 104, FLAT)
    assert demand(102) < 1e4 < demand(104)
    assert below["bound_by"] == "compute" and below["images_per_s"] == pytest.approx(demand(102))
    assert above["bound_by"] == "storage" and above["images_per_s"] == pytest.approx(1e4)
    assert above["storage_utilisation"] == pytest.approx(1.0)
    assert above["storage_demand_mb_s"] == pytest.approx(demand(104) * 1e5 / 1e6)
    big = project_scale(CEIL, 256, FLAT)
    assert big["efficiency"] == pytest.approx(1e4 / (256 * 100))


def test_a_slow_link_binds_as_communication():
    slow = Fabric(flat=Link(1e8, 0.0, "flat", "test"), storage_bytes_s=1e12)
    row = project_scale(CEIL, 8, slow, "ring")
    # 1e8 / 1e8 x 1.75 = 1.75 s, half exposed: 0.875 s against 0.32 s of compute
    assert row["exposed_comm_s"] == pytest.approx(0.875)
    assert row["bound_by"] == "communication"
    assert row["efficiency"] == pytest.approx(0.32 / (0.32 + 0.875))


def test_auto_takes_the_cheaper_algorithm():
    latent = Fabric(flat=Link(10e9, 1e-3, "flat", "test"), storage_bytes_s=1e12)
    row = project_scale(CEIL, 64, latent, "auto")
    assert row["algorithm"] == "tree"
    assert row["allreduce_s"] == pytest.approx(12e-3 + 0.01 * 126 / 64)
    assert row["allreduce_ring_s"] == pytest.approx(126e-3 + 0.01 * 126 / 64)
    assert project_scale(CEIL, 64, latent, "ring")["algorithm"] == "ring"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100Gbit", 12.5e9),
        ("100Gbps", 12.5e9),
        ("100 Gb/s", 12.5e9),
        ("25GB/s", 25e9),
        ("25GBps", 25e9),
        ("1GiB/s", 2**30),
        ("800Mbit/s", 1e8),
        ("20GB", 20e9),
    ],
)
def test_rates(text, expected):
    assert rate_bytes_s(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["100", 100, "fast", "5us", "GB/s", "-1GB/s", "0Gbit", "10mb/s", True, "1e999GB/s"])
def test_not_a_rate(text):
    with pytest.raises(ValueError):
        rate_bytes_s(text)


def test_sizes_and_latencies():
    assert size_bytes("45MB") == 45e6 and size_bytes("1.5MiB") == 1.5 * 2**20 and size_bytes(4096) == 4096
    assert seconds("5us") == pytest.approx(5e-6) and seconds("2ms") == pytest.approx(2e-3) and seconds("0s") == 0
    for bad in ("0B", "-5MB", "big"):
        with pytest.raises(ValueError):
            size_bytes(bad)
    for bad in ("5", 5, "-5us", "5 parsecs"):
        with pytest.raises(ValueError):
            seconds(bad)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": -2}, "nodes"),
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"nodes": "8"}, "nodes"),
        ({"intra_node_link": "fast"}, "intra_node_link"),
        ({"intra_node_link": 100}, "intra_node_link"),
        ({"inter_node_link": "10us"}, "inter_node_link"),
        ({"inter_node_link": None}, "inter_node_link"),
        ({"latency": "5"}, "latency"),
        ({"storage_ceiling": "lots"}, "storage_ceiling"),
        ({"gpu_per_node": 8}, "gpu_per_node"),
    ],
)
def test_bad_cluster_refused_naming_the_field(change, field):
    with pytest.raises(ConfigError, match=rf"\b{field}\b"):
        parse(Cluster, {**CLUSTER, **change})


def test_one_node_cluster_needs_no_network():
    c = parse(Cluster, {k: v for k, v in CLUSTER.items() if k != "inter_node_link"} | {"nodes": 1})
    assert c.gpus == 8


# --- The reader: ceilings from a results frame --------------------------------------------------------------------

KEY = "tiny/dali/bs8/img64/amp0/local#abc"


def frame(**extra) -> pd.DataFrame:
    doc = {
        "workload": ["ssd", "ssd"],
        "gpus": [1, 2],
        "valid": [True, True],
        "throughput_img_s": [10.0, 16.0],
        "comm_share": [0.0, 0.2],
        "per_gpu_read_mb_s": [2.0, 1.9],
        "storage_ceiling_mb_s": [50.0, 50.0],
        "config_key": [KEY, KEY],
        "allreduce_s": [math.nan, 0.5],
        "allreduce_bytes": [48e6, 48e6],
    }
    doc.update(extra)
    return pd.DataFrame({k: v for k, v in doc.items() if v is not None})


def test_ceilings_from_a_run():
    (item,) = inputs_from_run(frame(), "run folder r", Given())
    c = item.ceilings
    assert (c.one_rank_img_s, c.compute_img_s, c.batch_size, c.allreduce_bytes, c.buckets) == (10, 10, 8, 48e6, 1)
    assert c.bytes_per_image == pytest.approx(2e6 / 10)  # the most demanding scale per GPU: 2 MB/s at 10 img/s
    # one rank's step at 2 ranks: 8 images at 16/2 img/s = 1 s; 20% of it exposed, of a 0.5 s allreduce
    assert c.exposed_fraction == pytest.approx(0.4)
    assert item.machine.flat.bus_bytes_s == pytest.approx(48e6 / 0.5)  # busbw at 2 ranks: algbw x 1
    assert item.machine.storage_bytes_s == 50e6
    rows = project([item], [8], None, Given(), "run folder r")
    measured = [r for r in rows if r["kind"] == "measured"]
    assert [r["gpus"] for r in measured] == [1, 2]
    assert measured[1]["images_per_s"] == 16.0 and measured[1]["projected_images_per_s"] == pytest.approx(16.0)
    assert rows[-1]["kind"] == "projection" and rows[-1]["gpus"] == 8


def test_each_measured_scale_is_checked_on_its_own_allreduce_probe():
    three = frame(
        workload=["ssd"] * 3,
        gpus=[1, 2, 4],
        valid=[True] * 3,
        throughput_img_s=[10.0, 16.0, 24.0],
        comm_share=[0.0, 0.2, 0.3],
        per_gpu_read_mb_s=[2.0, 1.9, 1.8],
        storage_ceiling_mb_s=[50.0] * 3,
        config_key=[KEY] * 3,
        allreduce_s=[math.nan, 0.5, 1.2],
        allreduce_bytes=[48e6] * 3,
    )
    (item,) = inputs_from_run(three, "r", Given())
    # the overlap is the largest scale's: 0.3 of one rank's 8 x 4 / 24 s step, over its 1.2 s allreduce
    assert item.ceilings.exposed_fraction == pytest.approx(0.3 * (32 / 24) / 1.2)
    rows = {r["gpus"]: r for r in project([item], [8], None, Given(), "r") if r["kind"] == "measured"}
    assert rows[2]["allreduce_s"] == pytest.approx(0.5) and rows[2]["link_source"] == "measured at 2 ranks"
    assert rows[4]["allreduce_s"] == pytest.approx(1.2) and rows[4]["link_source"] == "measured at 4 ranks"
    assert rows[4]["measured_allreduce_s"] == 1.2


def test_zero_at_one_rank_is_no_figure_not_an_error():
    # an allreduce over one rank takes no time and moves nothing: the suite may well write 0 there
    (item,) = inputs_from_run(frame(allreduce_s=[0.0, 0.5], allreduce_bytes=[0, 48e6]), "r", Given())
    assert item.ceilings.allreduce_bytes == 48e6 and item.machine.flat.bus_bytes_s == pytest.approx(48e6 / 0.5)


def test_exposed_fraction_is_capped_at_the_whole_allreduce():
    (item,) = inputs_from_run(frame(comm_share=[0.0, 0.9]), "r", Given())
    assert item.ceilings.exposed_fraction == 1.0


def test_independent_ceiling_per_rank_as_compute_basis():
    (item,) = inputs_from_run(frame(independent_img_s=[10.0, 15.0]), "r", Given(compute_from="independent"))
    assert item.ceilings.compute_img_s == 7.5 and item.ceilings.one_rank_img_s == 10.0
    row = project_scale(item.ceilings, 1, item.machine)
    assert row["images_per_s"] == 10.0  # a lone rank does not share its node


def test_flags_override_the_run():
    given = Given(compute_img_s=20.0, batch_size=16, link_bytes_s=1e9, exposed_fraction=0.1, storage_bytes_s=1e9)
    (item,) = inputs_from_run(frame(), "r", given)
    c = item.ceilings
    assert (c.compute_img_s, c.one_rank_img_s, c.batch_size, c.exposed_fraction) == (20.0, 20.0, 16, 0.1)
    assert item.machine.flat.bus_bytes_s == 1e9 and item.machine.storage_bytes_s == 1e9
    # the measured scales keep their efficiency against the run's own 1-rank rate
    assert [m["efficiency"] for m in item.measured] == [1.0, 0.8]
    assert project_scale(c, 1, item.machine)["images_per_s"] == 20.0


@pytest.mark.parametrize(
    ("change", "given", "names"),
    [
        ({"allreduce_bytes": None}, Given(), "column allreduce_bytes missing.*--allreduce-bytes"),
        ({"allreduce_bytes": [math.nan, math.nan]}, Given(), "column allreduce_bytes has no value"),
        ({"allreduce_s": None}, Given(), "has no ceilings: column allreduce_s missing.*--link"),
        ({"storage_ceiling_mb_s": None}, Given(), "column storage_ceiling_mb_s missing.*--storage-ceiling"),
        ({"per_gpu_read_mb_s": None}, Given(), "column per_gpu_read_mb_s missing.*--bytes-per-image"),
        ({"per_gpu_read_mb_s": [0.0, 0.0]}, Given(), "column per_gpu_read_mb_s has no value above zero"),
        ({}, Given(compute_from="independent"), "column independent_img_s missing.*--compute-img-s"),
        ({"config_key": None}, Given(), "batch_size.*--batch-size"),
        ({"gpus": [2, 4]}, Given(), "no 1-rank scale.*--compute-img-s"),
        ({"allreduce_s": [math.nan, -0.5]}, Given(), "column 'allreduce_s' row 3"),
        ({"throughput_img_s": [10.0, "fast"]}, Given(), "column 'throughput_img_s' row 3"),
    ],
)
def test_a_run_without_ceilings_is_refused_naming_the_column(change, given, names):
    with pytest.raises((ResultsInputError, ConfigError), match=names):
        items = inputs_from_run(frame(**change), "run folder r", given)
        project(items, [8], None, given, "run folder r")
