"""observation_writer's one-process document writer: new files only, names checked."""

import json
import subprocess
import sys

from conftest import REPO

SCRIPT = REPO / "roles" / "observation_writer" / "files" / "write_documents.py"


def write(request):
    return subprocess.run([sys.executable, str(SCRIPT)], input=json.dumps(request), capture_output=True, text=True)


def test_documents_are_written_once_with_their_header(tmp_path):
    request = {"dir": str(tmp_path / "run"), "host": "host-1", "run_id": "20261130T000000Z",
               "documents": [{"name": "iommu.json", "schema": "serving-rollout.iommu/v1", "body": {"enabled": False}}]}
    first = write(request)
    assert first.returncode == 0 and json.loads(first.stdout)["written"] == ["iommu.json"]
    path = tmp_path / "run" / "iommu.json"
    assert json.loads(path.read_text()) == {"schema": "serving-rollout.iommu/v1", "host": "host-1",
                                            "run_id": "20261130T000000Z", "enabled": False}
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    again = write({**request, "documents": [{**request["documents"][0], "body": {"enabled": True}}]})
    assert again.returncode != 0 and "already exists: a run folder is never overwritten" in again.stderr
    assert json.loads(path.read_text())["enabled"] is False


def test_bad_document_name_is_refused_before_writing(tmp_path):
    result = write({"dir": str(tmp_path / "run"), "host": "h", "run_id": "r",
                    "documents": [{"name": "../escape.json", "schema": "s", "body": {}}]})
    assert result.returncode != 0 and "got ['../escape.json']" in result.stderr
    assert not (tmp_path / "run").exists()
