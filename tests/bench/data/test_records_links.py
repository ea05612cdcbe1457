"""Generating a records dataset never writes through a link planted in its folder (issue 48, item 2)."""

from __future__ import annotations

import json

from bench.data.records import RECORDS_MANIFEST, RecordsSpec, file_name, generate_records, load_records


def test_planted_tmp_links_are_replaced_not_written_through(tmp_path):
    """Whoever can write the dataset folder (a workload's own dataset.path, the shared store) plants the
    temp names generation writes to as links to two victim files: both keep their bytes."""
    out = tmp_path / "records"
    out.mkdir()
    spec = RecordsSpec("raw", files=2, samples_per_file=1, mean=4096, seed=3)
    victims = {name: tmp_path / f"victim-{i}" for i, name in enumerate([file_name(spec, 0), RECORDS_MANIFEST])}
    for name, victim in victims.items():
        victim.write_text("theirs\n")
        (out / f".{name}.tmp").symlink_to(victim)
    manifest = generate_records(spec, out)
    assert all(v.read_text() == "theirs\n" for v in victims.values())
    assert [f["name"] for f in manifest["files"]] == [file_name(spec, 0), file_name(spec, 1)]
    assert (out / file_name(spec, 0)).stat().st_size == manifest["files"][0]["bytes"]
    assert json.loads((out / RECORDS_MANIFEST).read_text()) == manifest
    assert load_records(out) == manifest
    assert not any(p.name.endswith(".tmp") for p in out.iterdir())  # the links themselves are gone


def test_a_link_planted_at_a_files_own_name_is_replaced_not_written_through(tmp_path):
    out = tmp_path / "records"
    out.mkdir()
    spec = RecordsSpec("raw", files=1, samples_per_file=1, mean=4096, seed=3)
    victim = tmp_path / "victim"
    victim.write_text("theirs\n")
    (out / file_name(spec, 0)).symlink_to(victim)
    manifest = generate_records(spec, out)
    assert victim.read_text() == "theirs\n"
    written = out / file_name(spec, 0)
    assert written.is_file() and not written.is_symlink()
    assert written.stat().st_size == manifest["files"][0]["bytes"] == 4096 and load_records(out) == manifest
