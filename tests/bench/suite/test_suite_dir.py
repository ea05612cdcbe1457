"""A suite run's folder: one per run id (never shared by two ids), a name the report server serves, and
today's name for an id that needs no sanitising."""

from __future__ import annotations

from bench.suite.plan import suite_dir, suite_run_identity
from scalewatch.web.files import RUN_DIR_RE


def test_ids_that_differ_only_in_characters_a_path_cannot_hold_get_their_own_folders(tmp_path):
    ids = [
        suite_run_identity("scaling_regression", "manual__2026-12-01T03:00:00+00:00"),
        suite_run_identity("scaling_regression", "manual__2026-12-01T03-00-00+00:00"),
        suite_run_identity("scaling_regression", "manual__2026-12-01T03-00-00-00-00"),
        suite_run_identity("scaling_regression", "manual__2026-12-01T03:00:00-00:00"),
        "a:b",
        "a+b",
        "a-b",
    ]
    folders = [suite_dir(tmp_path, i) for i in ids]
    assert len(set(folders)) == len(ids), folders
    for folder in folders:  # every one a single folder under the root that the report server would serve
        assert folder.parent == tmp_path and RUN_DIR_RE.fullmatch(folder.name), folder.name


def test_an_id_that_needs_no_sanitising_keeps_todays_folder_name(tmp_path):
    for clean in ("manual-20261201T030000", "scaling_regression.scheduled__history-test-000", "a-b"):
        assert suite_dir(tmp_path, clean) == tmp_path / clean


def test_the_same_id_always_maps_to_the_same_folder(tmp_path):
    """Every task of a run (plan, train, confirm, record, report link) finds the one folder again."""
    run = suite_run_identity("scaling_regression", "scheduled__2026-01-05T00:00:00+00:00")
    assert suite_dir(tmp_path, run) == suite_dir(tmp_path, run)
    assert suite_dir(tmp_path, run).name.startswith("scaling_regression.scheduled__2026-01-05T00-00-00-00-00-")


def test_no_id_names_the_root_or_a_folder_above_it(tmp_path):
    for hostile in ("", ".", "..", "../x", "/etc"):
        folder = suite_dir(tmp_path, hostile)
        assert folder.parent == tmp_path and folder.name not in ("", ".", ".."), (hostile, folder)
