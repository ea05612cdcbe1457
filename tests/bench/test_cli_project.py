"""`bench project`: the contract from outside (a results.csv the test writes, no training), and every bad input
refused with exit 2 and one line naming the field."""

import json
import re
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cli import main
from tests.conftest import BENCH

KEY = "tiny/dali/bs8/img64/amp0/local#abc"
# A run folder's results.csv as the suite writes it once ceilings are on (figures invented, shape kept).
RESULTS = f"""suite_run_id,workload,gpus,state,valid,throughput_img_s,comm_share,per_gpu_read_mb_s,\
storage_ceiling_mb_s,config_key,independent_img_s,allreduce_s,allreduce_bytes,oversubscribed,bottleneck
r1,ssd,1,COMPLETED,True,10.0,0.0,2.0,50.0,{KEY},10.0,,48000000,False,
r1,ssd,2,COMPLETED,True,16.0,0.2,1.9,50.0,{KEY},17.0,0.5,48000000,False,communication
r1,deeplabv3plus,1,COMPLETED,True,4.0,0.0,1.0,50.0,{KEY},4.0,,160000000,False,
r1,deeplabv3plus,2,COMPLETED,True,7.0,0.1,1.0,50.0,{KEY},7.5,1.0,160000000,False,
r1,deeplabv3plus,4,FAILED,False,,,,50.0,{KEY},,,,False,
"""
CLUSTER = """name: dgx
nodes: 128
gpus_per_node: 8
intra_node_link: 450GB/s
inter_node_link: 3200Gbit
latency: 5us
inter_node_latency: 10us
storage_ceiling: 20GB/s
"""


@pytest.fixture
def run_dir(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.csv").write_text(RESULTS)
    return folder


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BENCH, "project", *args], capture_output=True, text=True, timeout=120)


def test_contract_json_from_a_run_folder_and_a_cluster(run_dir, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    done = bench(str(run_dir), "--gpus", "8,64,1024", "--json", "--cluster", str(cluster))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert list(doc) == ["projections"]
    rows = doc["projections"]
    for row in rows:
        assert {"workload", "gpus", "images_per_s", "efficiency", "bound_by", "kind"} <= set(row)
    projected = [(r["workload"], r["gpus"]) for r in rows if r["kind"] == "projection"]
    assert projected == [(w, n) for w in ("ssd", "deeplabv3plus") for n in (8, 64, 1024)]
    measured = [(r["workload"], r["gpus"]) for r in rows if r["kind"] == "measured"]
    assert measured == [("ssd", 1), ("ssd", 2), ("deeplabv3plus", 1), ("deeplabv3plus", 2)]  # the failed 4 is no figure
    by = {(r["workload"], r["gpus"], r["kind"]): r for r in rows}
    # measured scales keep their measured figure, the model's beside it (on this machine's measured link)
    ssd2 = by[("ssd", 2, "measured")]
    assert ssd2["images_per_s"] == 16.0 and ssd2["efficiency"] == pytest.approx(0.8)
    assert ssd2["projected_images_per_s"] == pytest.approx(16.0) and ssd2["measured_bottleneck"] == "communication"
    # 1024 GPUs over 128 nodes of the described cluster: its network, the tree, the cluster's storage
    far = by[("ssd", 1024, "projection")]
    assert (far["nodes"], far["link"], far["algorithm"]) == (128, "inter_node", "tree")
    assert far["bus_bandwidth_gb_s"] == pytest.approx(400.0)  # 3200 Gbit < 450 GB/s per GPU
    assert far["storage_ceiling_mb_s"] == pytest.approx(20000.0)
    assert far["bound_by"] in ("compute", "communication", "storage")
    assert 0 < far["efficiency"] <= 1
    assert by[("ssd", 8, "projection")]["link"] == "intra_node"


def test_text_shows_measured_vs_projected_and_labels_projections(run_dir):
    done = bench(str(run_dir), "--gpus", "8,64")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    ssd = lines[lines.index(next(line for line in lines if line.startswith("ssd:"))) :]
    assert "measured" in ssd[1] and "projected" in ssd[1]
    assert ssd[2].split()[:3] == ["1", "measured", "10.0"]
    assert ssd[3].split()[:5] == ["2", "measured", "16.0", "16.0", "+0%"]
    assert ssd[4].split()[:3] == ["8", "projection", "—"]
    assert "not measurements" in lines[-1]


def test_flags_alone_project_without_a_run_folder():
    done = bench(
        *("--gpus", "8,64", "--json", "--workload", "resnet", "--compute-img-s", "100", "--batch-size", "32"),
        *("--allreduce-bytes", "100MB", "--link", "25GB/s", "--latency", "5us", "--storage-ceiling", "20GB/s"),
        *("--bytes-per-image", "110kB", "--algorithm", "ring"),
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["projections"]
    assert [(r["kind"], r["gpus"]) for r in rows] == [("projection", 8), ("projection", 64)]
    # 100 MB in 2 buckets of Horovod's 64 MiB at 25 GB/s: 2 x 14 x 5 us + 0.004 x 14/8, all exposed by default
    allreduce = 2 * 14 * 5e-6 + 0.004 * 14 / 8
    assert rows[0]["allreduce_s"] == pytest.approx(allreduce)
    assert rows[0]["images_per_s"] == pytest.approx(8 * 32 / (0.32 + allreduce))
    assert rows[0]["exposed_fraction_source"].startswith("default")


def refused(capsys, *args: str) -> str:
    try:
        code = main(["project", *args])
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    return err


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("--gpus", "0"), "--gpus: '0'"),
        (("--gpus", "-8"), "--gpus: '-8'"),
        (("--gpus", "8,x"), "--gpus: 'x'"),
        (("--gpus", "8,8"), "--gpus: .* twice"),
        (("--gpus", "8", "--link", "100"), "--link: '100' is not a rate"),
        (("--gpus", "8", "--link", "5us"), "--link: '5us' is not a rate"),
        (("--gpus", "8", "--storage-ceiling", "0GB/s"), "--storage-ceiling: .* above zero"),
        (("--gpus", "8", "--latency", "5"), "--latency: '5' is not a duration"),
        (("--gpus", "8", "--batch-size", "0"), "--batch-size: '0'"),
        (("--gpus", "8", "--compute-img-s", "-3"), "--compute-img-s: '-3'"),
        (("--gpus", "8", "--allreduce-bytes", "0"), "--allreduce-bytes: .* above zero"),
        (("--gpus", "8", "--bytes-per-image", "lots"), "--bytes-per-image: 'lots' is not a size"),
        (("--gpus", "8", "--exposed-fraction", "1.5"), "--exposed-fraction: '1.5'"),
        (("--gpus", "8", "--allreduce-s", "0"), "--allreduce-s: '0'"),
        (("--gpus", "8", "--buckets", "0"), "--buckets: '0'"),
        (("--gpus", "8", "--algorithm", "star"), "--algorithm"),
        (("--gpus", "8", "--compute-img-s", "10"), "--workload, --batch-size, --allreduce-bytes, --bytes-per-image"),
    ],
)
def test_bad_flags_refused_naming_the_flag(capsys, args, names):
    err = refused(capsys, *args)
    if err.startswith("usage:"):  # argparse's refusal: usage, then one line naming the flag
        err = err.splitlines()[-1]
    assert re.search(names, err) and "\n" not in err, err


@pytest.mark.parametrize(
    ("edit", "names"),
    [
        (("nodes: 128", "nodes: 0"), "nodes: Input should be greater than or equal to 1"),
        (("gpus_per_node: 8", "gpus_per_node: -8"), "gpus_per_node"),
        (("intra_node_link: 450GB/s", "intra_node_link: fast"), "intra_node_link: 'fast' is not a rate"),
        (("inter_node_link: 3200Gbit", "inter_node_link: 3200"), "inter_node_link: 3200 is not a rate"),
        (("latency: 5us", "latency: soon"), "latency: 'soon' is not a duration"),
        (("name: dgx", "nmae: dgx"), "nmae"),
    ],
)
def test_bad_cluster_refused_naming_the_field(capsys, run_dir, tmp_path, edit, names):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(CLUSTER.replace(*edit))
    err = refused(capsys, str(run_dir), "--gpus", "8", "--cluster", str(cluster))
    assert names in err and "\n" not in err, err


def test_more_gpus_than_the_cluster_holds_is_refused(capsys, run_dir, tmp_path):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(CLUSTER.replace("nodes: 128", "nodes: 2"))
    err = refused(capsys, str(run_dir), "--gpus", "8,64", "--cluster", str(cluster))
    assert err == "bench project: --gpus: 64 GPUs exceed the described cluster 'dgx': nodes 2 x gpus_per_node 8 = 16"


def test_cluster_file_that_is_missing_or_not_a_mapping(capsys, run_dir, tmp_path):
    assert "no such file" in refused(capsys, str(run_dir), "--gpus", "8", "--cluster", str(tmp_path / "none.yaml"))
    listed = tmp_path / "list.yaml"
    listed.write_text("- 8\n- 64\n")
    assert "must be a mapping" in refused(capsys, str(run_dir), "--gpus", "8", "--cluster", str(listed))


def test_run_folder_without_ceilings_is_refused_naming_the_column(capsys, tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    # a run folder from before ceilings: no allreduce figures at all
    (folder / "results.csv").write_text(
        "workload,gpus,valid,throughput_img_s,comm_share,per_gpu_read_mb_s,storage_ceiling_mb_s,config_key\n"
        f"ssd,1,True,10,0,2,50,{KEY}\nssd,2,True,16,0.2,1.9,50,{KEY}\n"
    )
    err = refused(capsys, str(folder), "--gpus", "8")
    assert err == (
        f"bench project: run folder {folder} (workload ssd) has no ceilings: column allreduce_bytes missing; "
        "run the suite with ceilings on or give --allreduce-bytes"
    )
    err = refused(capsys, str(folder), "--gpus", "8", "--allreduce-bytes", "48MB")
    assert "has no ceilings: column allreduce_s missing" in err and "--link" in err
    # with the link given the same folder projects
    assert main(["project", str(folder), "--gpus", "8", "--allreduce-bytes", "48MB", "--link", "1Gbit"]) == 0
    assert "no results.csv" in refused(capsys, str(tmp_path), "--gpus", "8")


VALUES = st.one_of(
    st.sampled_from(["0", "-1", "nan", "inf", "1e999", "1e999GB/s", "²", "8,,8", "5 us", "1_0", "0.0B", "", " "]),
    st.text(max_size=12),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flag=st.sampled_from(
        [
            "--gpus",
            "--link",
            "--latency",
            "--storage-ceiling",
            "--batch-size",
            "--compute-img-s",
            "--allreduce-bytes",
            "--allreduce-s",
            "--allreduce-gpus",
            "--buckets",
            "--bucket-bytes",
            "--bytes-per-image",
            "--exposed-fraction",
        ]
    ),
    value=VALUES,
)
def test_fuzzed_flags_project_or_refuse_never_crash(capsys, run_dir, flag, value):
    argv = [str(run_dir), "--json", *(["--gpus", "8"] if flag != "--gpus" else []), flag, value]
    try:
        code = main(["project", *argv])
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    assert code in (0, 2), err
    if code == 0:
        assert all(r["kind"] in ("measured", "projection") for r in json.loads(out)["projections"])
    else:
        assert err.strip().splitlines()[-1].startswith(("bench project: ", "usage:", "bench project: error:")), err
