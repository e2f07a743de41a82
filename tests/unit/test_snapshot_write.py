"""serving_snapshot's write (module_utils/snapshot_take.py write_snapshot), in a temporary folder: a manifest that
cannot be written (here: a folder in its place, as a full disk fails a write) takes this attempt's copies - a
secret-bearing EnvironmentFile's among them - back, puts an earlier snapshot back as it was, and says so only
after checking."""

import json

from serving_rollout.module_utils import snapshot_take as serving_snapshot


def files(tmp_path, secret):
    env = tmp_path / "sglang.env"
    env.write_text(f"SGLANG_API_KEY={secret}\n")
    return [{"path": str(env), "sha256": serving_snapshot.sha256_of(str(env))}]


def test_a_manifest_that_cannot_be_written_leaves_no_copy_behind(tmp_path):
    dest = tmp_path / "state"
    dest.mkdir()
    (dest / "manifest.json").mkdir()  # the manifest's write fails after the copies were swapped in
    problem = serving_snapshot.write_snapshot(str(dest), files(tmp_path, "s3cret"), {"files": []},
                                              str(dest / "manifest.json"))
    assert problem and problem.endswith("nothing of this attempt was left behind (checked); an earlier snapshot is "
                                        "as it was")
    assert sorted(p.name for p in dest.iterdir()) == ["manifest.json"]  # no files/, no staging folder


def test_a_failed_attempt_puts_the_earlier_snapshot_back(tmp_path):
    dest = tmp_path / "state"
    assert serving_snapshot.write_snapshot(str(dest), files(tmp_path, "old"), {"files": []},
                                           str(dest / "manifest.json")) is None
    earlier = {p.name: p.read_text() for p in (dest / "files").iterdir()}
    manifest = json.loads((dest / "manifest.json").read_text())
    (dest / "manifest.json").unlink()
    (dest / "manifest.json").mkdir()
    problem = serving_snapshot.write_snapshot(str(dest), files(tmp_path, "new"), {"files": []},
                                              str(dest / "manifest.json"))
    assert problem and "nothing of this attempt was left behind (checked)" in problem
    assert {p.name: p.read_text() for p in (dest / "files").iterdir()} == earlier  # the earlier copies, not "new"
    assert sorted(p.name for p in dest.iterdir()) == ["files", "manifest.json"]
    assert "SGLANG_API_KEY=old" in next(iter(earlier.values())) and manifest["files"][0]["copy"].endswith("sglang.env")
