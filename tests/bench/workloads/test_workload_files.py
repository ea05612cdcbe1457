"""Workload files (issue 39): the built-ins load, bad files are refused naming the field, a suite names
built-ins or files, and `bench workloads list|check` exit 0 / 2."""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml

from bench.cli.main import main
from bench.config.models import SuiteSettings, TrainConfig
from bench.config.settings import settings_from
from bench.config.types import parse
from bench.errors import ConfigError
from bench.workloads.accelerators import PROFILES
from bench.workloads.spec import builtin_names, load, load_file, resolve

GOOD = {
    "dataset": {"format": "raw", "files": 4, "samples_per_file": 2, "record_bytes": {"mean": 4096, "stdev": 512}},
    "reader": {"threads": 1, "batch": 4},
    "compute": {"accelerator": {"seconds_per_batch": 0.01}},
    "min_au": 0.9,
}


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue()


def test_builtins_hold_the_real_models_and_emulated_ones_with_sourced_profiles():
    names = builtin_names()
    assert {"ssd", "deeplabv3plus", "retinanet-b200", "unet3d-h100", "unet3d-b200"} <= set(names)
    assert load("ssd").spec.compute.model == "ssd" and not load("ssd").spec.emulated
    retina = load("retinanet-b200")
    assert (retina.seconds_per_batch, retina.batch_size, retina.min_au) == (0.04755, 24, 0.85)
    assert load("unet3d-h100").seconds_per_batch == 0.323 and load("unet3d-b200").seconds_per_batch == 0.162
    for p in PROFILES.values():  # every shipped figure names where it comes from and when
        assert p.source and p.date.startswith("2026-") and p.basis in ("measured", "published", "derived")
    code, text = cli("workloads", "list")
    assert code == 0 and "retinanet-b200" in text and "163 MB/s per accelerator" in text


def _bad(**change):
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    for path, value in change.items():
        *parents, leaf = path.split("__")
        node = doc
        for p in parents:
            node = node[p]
        if value is ...:
            del node[leaf]
        else:
            node[leaf] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (_bad(dataset__format="tfrecord"), "dataset.format"),
        (_bad(dataset__colour="red"), "dataset.colour"),
        (_bad(surprise=1), "surprise"),
        (_bad(dataset__record_bytes={"mean": 10}), "dataset.record_bytes.mean"),
        (_bad(dataset__files=...), "format, files and record_bytes"),
        (_bad(reader__batch=0), "reader.batch"),
        (_bad(compute__accelerator={"seconds_per_batch": 0.1, "images_per_s": 5}), "compute.accelerator"),
        (_bad(compute__accelerator={"profile": "tpu-v9"}), "compute.accelerator"),
        (_bad(compute__model="ssd"), "compute"),
        (_bad(min_au=1.5), "min_au"),
        (_bad(dataset__samples_per_file=3, dataset__format="jpeg"), "samples_per_file"),
        ("- a list", "must be a mapping"),
    ],
)
def test_a_bad_workload_file_is_refused_naming_the_field(tmp_path, doc, field):
    path = tmp_path / "w.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert field in str(caught.value) and str(path) in str(caught.value)
    code, text = cli("workloads", "check", str(path))
    assert code == 2 and field in text


def test_a_good_file_checks_and_a_suite_names_it_beside_built_ins(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    code, text = cli("workloads", "check", str(path))
    assert code == 0 and "valid" in text
    settings = settings_from({"workloads": ["ssd", "retinanet-b200", str(path)]})
    assert settings.training.workloads == ("ssd", "retinanet-b200", str(path))
    assert SuiteSettings().training.workloads == ("ssd", "deeplabv3plus")  # existing suites keep their names
    for bad, needle in (("resnet", "not a built-in"), (str(tmp_path / "none.yaml"), "does not exist")):
        with pytest.raises(ConfigError, match=needle):
            settings_from({"workloads": [bad]})


def test_a_rank_is_real_or_emulated_never_a_name_without_a_model():
    with pytest.raises(ConfigError, match="workload"):
        parse(TrainConfig, {"workload": "retinanet-b200", "steps": 1, "data": "/d"})
    cfg = parse(
        TrainConfig,
        {"workload": "retinanet-b200", "steps": 1, "data": "/d", "accelerator_s": 0.05, "record_format": "jpeg"},
    )
    again = TrainConfig.model_validate_json(cfg.model_dump_json(exclude_unset=True))  # a rank's train.json
    assert again.accelerator_s == 0.05 and again.record_format == "jpeg" and again == cfg


def test_a_suite_naming_a_bad_file_or_one_name_twice_is_refused_before_it_runs(tmp_path):
    from bench.workloads.spec import check_refs

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_bad(reader__batch=0)))
    with pytest.raises(ConfigError, match=r"reader\.batch"):
        check_refs(("ssd", str(bad)))
    twin = tmp_path / "sub"
    twin.mkdir()
    (twin / "ssd.yaml").write_text(yaml.safe_dump(GOOD))
    with pytest.raises(ConfigError, match="ssd named twice"):
        check_refs(("ssd", str(twin / "ssd.yaml")))


def test_a_gpu_checks_profile_file_loads_and_a_dry_run_is_refused(tmp_path):
    from bench.gpucheck import accelerator_profile
    from bench.workloads.accelerators import profiles_from_file

    entry = {"workload": "ssd", "precision": "bf16", "preset": "production", "image_size": 300}
    entry |= {"batch_size": 64, "seconds_per_batch": 0.0493}
    header = {"accelerator": "NVIDIA H200", "source": "scripts/gpu-check.sh", "measured_at": "2026-12-05"}
    path = tmp_path / "accelerators.yaml"
    path.write_text(accelerator_profile(header | {"dry_run": False}, [entry]))
    (profile,) = profiles_from_file(path).values()
    assert (profile.name, profile.seconds_per_batch, profile.batch_size) == ("ssd-bf16@accelerators", 0.0493, 64)
    assert profile.accelerator == "NVIDIA H200" and profile.date == "2026-12-05"
    # a workload file emulates the GPU that gpu-check ran on, by the profile's name in that file
    workload = tmp_path / "mine.yaml"
    doc = _bad(compute__accelerator={"profile": "ssd-bf16@accelerators", "profile_file": str(path)}, reader__batch=32)
    workload.write_text(yaml.safe_dump(doc))
    mine = resolve("mine", load_file(workload))
    assert (mine.accelerator, mine.seconds_per_batch, mine.batch_size) == ("ssd-bf16@accelerators", 0.0493 / 2, 32)
    rank = {"workload": "mine", "steps": 1, "data": "/d", "accelerator": mine.accelerator, "accelerator_s": 0.02}
    assert parse(TrainConfig, rank).accelerator == "ssd-bf16@accelerators"  # the name travels to the rank
    path.write_text(accelerator_profile(header | {"dry_run": True}, [entry]))
    with pytest.raises(ConfigError, match="dry_run"):
        profiles_from_file(path)


def test_accelerators_at_au_is_measured_up_to_the_first_fall_then_projected_from_the_probe(tmp_path):
    """Measured up to the first count under min_au; past it, projected from the probe's storage for a
    scale's nodes (one node's ceiling x nodes under the aggregate curve's figure, evaluate.storage_for),
    and the basis names what binds: the per-node ceiling (client) or the aggregate (store)."""
    import pandas as pd

    from bench.analysis.verdict.accelerators import accelerators_at_au
    from bench.analysis.verdict.evaluate import storage_for
    from bench.config.models import SweepConfig

    def storage(probe: dict, launcher: str = "local", hosts: tuple[str, ...] = ()):
        suite = {"workloads": ("retinanet-b200",), "gpus": (1, 2), "dataset_path": tmp_path, "launcher": launcher}
        suite |= {"hosts": tuple(hosts), "output_dir": tmp_path / "out"}
        return storage_for(SweepConfig(**suite, train=TrainConfig(workload="ssd", steps=1, data=tmp_path)), probe)

    w = {"accelerator": "retinanet-b200", "min_au": 0.85, "batch": 24, "seconds_per_batch": 0.04755}
    w |= {"record_bytes": 322957.0}  # demand 163.0 MB/s, x 0.85 = 138.6 MB/s per accelerator at AU
    held = pd.DataFrame({"workload": "r", "gpus": [1, 2], "au": [0.93, 0.88], "valid": True})
    one_node = storage({"ceiling_mb_s": 434.0})  # a probe written before the multi-node curve
    measured, projected = accelerators_at_au(held, {"r": w}, one_node)["r"]
    assert (measured["measured"], measured["accelerators"], measured["au_fell_at"]) == (True, 2, None)
    # 434 MB/s / (163.0 MB/s x 0.85) = 3.13
    assert (projected["measured"], projected["accelerators"], projected["bound"]) == (False, 3, "client")
    hosts = ("a:4", "b:4", "c:4", "d:4")
    # Four slots a node; one node reads 434 MB/s, under four accelerators' 554: the client binds at 4.
    client = {"per_node_mb_s": 434.0, "bound": "client"}
    client["aggregate"] = [{"nodes": n, "mb_s": 430.0 * n, "min_node_mb_s": 430.0} for n in (1, 2, 4)]
    (_, projected) = accelerators_at_au(held, {"r": w}, storage(client, "ssh", hosts))["r"]
    assert (projected["accelerators"], projected["bound"]) == (3, "client")
    assert "one node's read ceiling" in projected["basis"]
    # One node feeds its four; from two nodes on the store gives 900 MB/s whatever the nodes: 900 / 138.6 = 6.5.
    store = {"per_node_mb_s": 600.0, "bound": "store"}
    store["aggregate"] = [{"nodes": 1, "mb_s": 600.0, "min_node_mb_s": 600.0}, {"nodes": 2, "mb_s": 900.0}]
    (_, projected) = accelerators_at_au(held, {"r": w}, storage(store, "ssh", hosts))["r"]
    assert (projected["accelerators"], projected["bound"], projected["storage_mb_s"]) == (6, "store", 900.0)
    assert "the store binds" in projected["basis"]
    fell = pd.DataFrame({"workload": "r", "gpus": [1, 2, 4], "au": [0.93, 0.80, 0.9], "valid": True})
    (only,) = accelerators_at_au(fell, {"r": w}, one_node)["r"]  # AU fell: nothing to project
    assert (only["accelerators"], only["au_fell_at"], only["measured"]) == (1, 2, True)
    none = pd.DataFrame({"workload": "r", "gpus": [1], "au": [0.5], "valid": True})
    assert accelerators_at_au(none, {"r": w}, None)["r"][0]["accelerators"] is None


def test_a_users_folder_of_mixed_formats_or_changed_files_is_refused_naming_the_file(tmp_path):
    from bench.data.records import RECORDS_MANIFEST, RecordsSpec, generate_records, load_records
    from bench.errors import DatasetError

    folder = tmp_path / "mine"
    generate_records(RecordsSpec("jpeg", 3, 1, 20_000), folder)
    (folder / RECORDS_MANIFEST).unlink()
    (folder / "zz.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    with pytest.raises(DatasetError, match=r"zz\.png: is png, not jpeg"):
        load_records(folder)
    (folder / "zz.png").unlink()
    assert load_records(folder)["format"] == "jpeg"  # detected, manifest written beside the files
    with open(folder / "00000001.jpg", "ab") as f:
        f.write(b"more")
    with pytest.raises(DatasetError, match=r"00000001\.jpg: listed in records\.json"):
        load_records(folder)


def test_the_forms_pattern_takes_every_built_in_and_workload_files_and_refuses_other_names(tmp_path):
    """The trigger form's JSON schema (UI and REST API) refuses an unknown workload before a run exists:
    every built-in is in its pattern, and so is an absolute .yaml path; a made-up name is not."""
    import re

    from bench.config.types import WORKLOAD_REF_PATTERN

    items = SuiteSettings.form_properties()["workloads"]["items"]
    assert items == {"type": "string", "pattern": WORKLOAD_REF_PATTERN}
    allowed = re.compile(WORKLOAD_REF_PATTERN)
    assert all(allowed.match(name) for name in builtin_names())
    assert allowed.match("/srv/suites/my-workload.yaml") and allowed.match("/x.yml")
    assert not any(allowed.match(bad) for bad in ("resnet", "ssd;rm -rf /", "relative.yaml", "/no-suffix", "SSD"))
