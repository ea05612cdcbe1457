"""An image model's dataset in a bucket (issue 64 item 3): staged with its index and headers checked, read
file by file through counted whole-object GETs against a real Ceph RGW, each object held to its staged
size and named when it does not decode; what a suite cannot do with one is refused naming the setting
(DALI's reader, a node ceiling, the differential reruns)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from bench.analysis.verdict.differential import NOT_SEPARABLE, add_differential
from bench.config.models import SweepConfig
from bench.config.settings import settings_from
from bench.data.dataset import coco_of, load_coco, segmentation_of
from bench.data.dataset_s3 import s3_tree
from bench.data.generate import ANNOTATIONS, SEG_INDEX, GenerateSpec, generate
from bench.data.location import S3Location
from bench.data.stage_s3 import S3_MANIFEST, stage_to_s3
from bench.errors import ConfigError, DatasetError
from bench.loaders.s3_get import CountedGets
from bench.loaders.s3_images import S3Opener
from bench.loaders.torch_loader import _decoded
from bench.results.schema import INDEPENDENT
from bench.suite.plan import check_bucket_readers, run_matrix
from bench.suite.staging_s3 import check_images


def test_an_index_naming_a_file_outside_its_tree_is_refused(tmp_path):
    root = tmp_path / "coco"
    generate(GenerateSpec("coco", root, images=4, seed=3))
    assert len(load_coco(root).files) == 4
    doc = json.loads((root / ANNOTATIONS).read_text())
    for name in ("../../etc/passwd", "/etc/passwd", "a/../../b.jpg", 7):
        doc["images"][1]["file_name"] = name
        (root / ANNOTATIONS).write_text(json.dumps(doc))
        with pytest.raises(DatasetError, match=r"file_name: .* is not a file name inside the dataset"):
            load_coco(root)
    seg = tmp_path / "segmentation"
    generate(GenerateSpec("segmentation", seg, images=4, seed=3))
    index = json.loads((seg / SEG_INDEX).read_text())
    index["pairs"][2][1] = "../coco/annotations.json"
    (seg / SEG_INDEX).write_text(json.dumps(index))
    with pytest.raises(DatasetError, match=r"pairs\[2\]: '../coco/annotations.json' is not a file name inside"):
        check_images("segmentation", seg)


def test_a_corrupt_jpeg_is_refused_before_the_upload_naming_the_local_file(tmp_path):
    root = tmp_path / "coco"
    generate(GenerateSpec("coco", root, images=4, seed=3))
    victim = root / "images" / load_coco(root).files[2]
    victim.write_bytes(b"\xff\xd8 not a jpeg at all" * 8)
    with pytest.raises(DatasetError, match=f"{victim}: corrupt image"):
        check_images("coco", root)


def _staged(s3, bucket: str, tmp_path, kind: str) -> tuple[S3Location, dict]:
    source = tmp_path / kind
    generate(GenerateSpec(kind, source, images=8, seed=11))
    location = S3Location(bucket, f"images/{kind}")
    stage_to_s3(s3, source, location)
    return location, json.loads(s3.get_object(Bucket=bucket, Key=location.key(S3_MANIFEST))["Body"].read())


@pytest.mark.slow
def test_each_file_is_one_counted_get_held_to_its_staged_size_and_named_when_it_does_not_decode(
    rgw, s3, bucket, tmp_path, monkeypatch
):
    for name, value in rgw.env().items():  # the node's own AWS variables, as a rank reads them
        monkeypatch.setenv(name, value)
    location, manifest = _staged(s3, bucket, tmp_path, "segmentation")
    tree = s3_tree(s3, location)
    seg = segmentation_of(tree)
    first = (seg.images[0], seg.masks[0])
    assert len(seg.images) == 8 and seg.sizes[0] == sum(manifest["files"][p]["size"] for p in first)
    opener = S3Opener(CountedGets(location), tree)
    image, mask = _decoded(opener(seg.images[0]), "RGB"), _decoded(opener(seg.masks[0]), "L")
    assert image.size == mask.size and opener.gets.received.value == seg.sizes[0]
    # an object of its staged size whose bytes are no image: the decode names the object
    name = seg.images[3]
    s3.put_object(Bucket=bucket, Key=location.key(name), Body=b"\0" * manifest["files"][name]["size"])
    with pytest.raises(DatasetError, match=rf"s3://{bucket}/images/segmentation/{name}: corrupt image"):
        _decoded(opener(name), "RGB")
    # an object of another size than staged: the dataset's error, naming the object and both sizes
    s3.put_object(Bucket=bucket, Key=location.key(name), Body=b"\0" * 10)
    size = manifest["files"][name]["size"]
    with pytest.raises(DatasetError, match=rf"{name}: a GET of the {size}-byte image returned 10 \(the object"):
        opener(name)
    assert opener.gets.errors.value == 0  # answers, not dropped connections
    # a staging manifest whose name climbs out of the prefix is no dataset
    manifest["files"]["../other/x.jpg"] = {"size": 1, "etag": "", "sha256": ""}
    s3.put_object(Bucket=bucket, Key=location.key(S3_MANIFEST), Body=json.dumps(manifest).encode())
    with pytest.raises(DatasetError, match=r"file name '../other/x.jpg' is not an object of this prefix"):
        s3_tree(s3, location)
    # a COCO tree reads through the same tree: sizes from the staging manifest
    coco_location, coco_manifest = _staged(s3, bucket, tmp_path, "coco")
    coco = coco_of(s3_tree(s3, coco_location))
    assert [coco_manifest["files"][f"images/{f}"]["size"] for f in coco.files] == list(coco.sizes)
    assert coco.annotations_file == f"s3://{bucket}/images/coco/{ANNOTATIONS}"


def _suite(tmp_path, **more) -> SweepConfig:
    """A suite as a user writes it (settings_from, then the run's config), its data in a bucket."""
    values = {"dataset_path": "s3://bench-data/weekly", "gpus": [1, 2], "workloads": ["ssd"], "loader": "torch"}
    return settings_from(values | {"ceilings": True} | more).sweep_config(tmp_path / "home", tmp_path / "out")


def test_an_image_model_over_s3_has_no_node_ceiling_no_dali_and_no_independent_ideal(tmp_path):
    suite = _suite(tmp_path)
    assert suite.resolved_ideal() == "linear"
    assert [m for m in run_matrix(suite) if m.get("variant") == INDEPENDENT] == []
    with pytest.raises(ConfigError, match=r"ideal: independent; ssd read.s. images from s3://bench-data/weekly"):
        _suite(tmp_path, ideal="independent")
    with pytest.raises(ConfigError, match="loader: dali; dataset_path s3://bench-data/weekly is an S3 location"):
        _suite(tmp_path, loader="dali")
    # a workload file naming the model (SweepConfig sees a path, not the model): refused when planned
    path = tmp_path / "my-ssd.yaml"
    spec = {"dataset": {"layout": "coco"}, "compute": {"model": "ssd"}, "reader": {"loader": "dali"}}
    path.write_text(yaml.safe_dump(spec))
    dali = _suite(tmp_path, workloads=[str(path)])
    with pytest.raises(ConfigError, match=r"workload my-ssd: loader dali .* set loader to torch"):
        check_bucket_readers(dali)
    path.write_text(yaml.safe_dump(spec | {"reader": {"loader": "torch"}}))
    with pytest.raises(ConfigError, match="ideal: independent; workload my-ssd reads images from s3://"):
        run_matrix(_suite(tmp_path, workloads=[str(path)]))  # auto on CPU slots resolves to independent


def test_a_cause_over_s3_says_why_no_rerun_confirmed_it():
    row = {"workload": "ssd", "gpus": 2, "baseline_gpus": 1, "bottleneck": "storage", "bytes_source": "s3"}
    passed = row | {"workload": "deeplabv3plus", "bottleneck": float("nan"), "emulated": False}
    frame = pd.DataFrame([row | {"emulated": False}, row | {"workload": "held", "emulated": True}, passed])
    out = add_differential(frame, pd.DataFrame(), lambda gpus: 0.7, lambda r: "")
    assert list(out["cause_check"]) == [NOT_SEPARABLE, "", ""]  # a row with no cause named has none to confirm
    files = add_differential(frame.assign(bytes_source="cachestat"), pd.DataFrame(), lambda gpus: 0.7, lambda r: "")
    assert list(files["cause_check"]) == ["", "", ""]
