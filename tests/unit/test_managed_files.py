"""Installing a managed unit's files: nothing changes when the render matches; a verified copy comes before
the first write; a failure mid-install (a real OS error: a folder that is a file) puts every file back;
the role's restore after a failed restart puts back changed, created and removed files alike. The lab
fills a real tmpfs in tests/integration/test_managed_lab.py."""

import hashlib
import json
import os

import pytest

from serving_rollout.module_utils.managed_files import InstallFailed, diffs, install, plan, restore

UNIT = "[Service]\nExecStart=/usr/bin/engine --tp 2\n"
NEW_UNIT = "[Service]\nExecStart=/usr/bin/engine --tp 2 --disable-custom-all-reduce\n"


@pytest.fixture
def host(tmp_path):
    etc = tmp_path / "etc"
    (etc / "engine.service.d").mkdir(parents=True)
    (etc / "engine.service").write_text(UNIT)
    (etc / "engine.service.d" / "10-old.conf").write_text("[Service]\nNice=5\n")
    return etc, str(tmp_path / "keep")


def snapshot(etc):
    return {str(p.relative_to(etc)): p.read_bytes() for p in sorted(etc.rglob("*")) if p.is_file()}


def test_a_render_that_matches_changes_nothing_and_keeps_no_copy(host):
    etc, keep = host
    files = {str(etc / "engine.service"): UNIT}
    assert plan(files, []) == {"write": [], "remove": []}
    assert install(files, plan(files, []), keep) == {"write": [], "remove": []}
    assert not os.path.exists(keep)


def test_an_install_writes_removes_and_keeps_a_verified_copy_that_restores_it_all(host):
    etc, keep = host
    before = snapshot(etc)
    files = {str(etc / "engine.service"): NEW_UNIT, str(etc / "engine.service.d" / "20-new.conf"): "[Service]\n"}
    done = install(files, plan(files, [str(etc / "engine.service.d" / "10-old.conf")]), keep)
    assert sorted(done["write"]) == sorted(files) and done["remove"] == [str(etc / "engine.service.d" / "10-old.conf")]
    assert (etc / "engine.service").read_text() == NEW_UNIT
    assert not (etc / "engine.service.d" / "10-old.conf").exists()
    manifest = json.loads((etc.parent / "keep" / "manifest.json").read_text())
    kept = {entry["path"]: entry for entry in manifest["files"]}
    assert kept[str(etc / "engine.service.d" / "20-new.conf")]["existed"] is False
    assert kept[str(etc / "engine.service")]["sha256"] == hashlib.sha256(UNIT.encode()).hexdigest()
    # The unit then fails to restart: the role puts back the copy (changed, created and removed files).
    restored = restore(keep)
    assert sorted(restored) == sorted([*files, str(etc / "engine.service.d" / "10-old.conf")])
    assert snapshot(etc) == before
    assert restore(keep) == []  # already as it was


def test_a_failure_mid_install_puts_back_the_files_already_written(host):
    etc, keep = host
    before = snapshot(etc)
    (etc / "blocked").write_text("a file where the render expects a folder\n")
    before["blocked"] = (etc / "blocked").read_bytes()
    files = {str(etc / "engine.service"): NEW_UNIT, str(etc / "blocked" / "20-new.conf"): "[Service]\n"}
    with pytest.raises(InstallFailed) as failed:
        install(files, plan(files, []), keep)
    assert str(etc / "blocked") in str(failed.value) and "put back from the verified copy" in str(failed.value)
    assert failed.value.restored == [str(etc / "engine.service")]
    assert snapshot(etc) == before


def test_a_copy_that_cannot_be_kept_changes_nothing(host):
    etc, _ = host
    before = snapshot(etc)
    keep = str(etc / "engine.service" / "keep")  # under a file: the copy cannot be made
    files = {str(etc / "engine.service"): NEW_UNIT}
    with pytest.raises(OSError):
        install(files, plan(files, []), keep)
    assert snapshot(etc) == before


def test_a_tampered_copy_is_never_restored(host):
    etc, keep = host
    files = {str(etc / "engine.service"): NEW_UNIT}
    install(files, plan(files, []), keep)
    manifest = json.loads((etc.parent / "keep" / "manifest.json").read_text())
    copy = etc.parent / "keep" / manifest["files"][0]["copy"]
    copy.write_text("[Service]\nExecStart=/bin/sh -c 'something else'\n")
    with pytest.raises(OSError, match="does not match its sha256"):
        restore(keep)
    assert (etc / "engine.service").read_text() == NEW_UNIT


def test_the_diff_never_shows_a_secret_the_replaced_unit_held_inline(host):
    etc, _ = host
    unit, old = str(etc / "engine.service"), str(etc / "engine.service.d" / "10-old.conf")
    (etc / "engine.service").write_text("[Service]\nEnvironment=HF_TOKEN=hf_planted0secret\n"
                                        "Environment=NCCL_P2P_DISABLE=1\n")
    files = {unit: "[Service]\nEnvironmentFile=/etc/engine.env\nEnvironment=NCCL_P2P_DISABLE=0\n"}
    shown = diffs(plan(files, [old]), files)
    assert [d["before_header"] for d in shown] == [unit, old]
    assert "hf_planted0secret" not in str(shown)
    assert "Environment=NCCL_P2P_DISABLE=1" in shown[0]["before"] and "NCCL_P2P_DISABLE=0" in shown[0]["after"]
    assert shown[1]["after"] == "" and "Nice=5" in shown[1]["before"]
