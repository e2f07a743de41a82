"""The observation documents on the controller (serving_rollout/observations.py, the observation_write action's
work): checked before writing, redacted, new files only, a full disk named."""

import json

import pytest

from serving_rollout import observations


def test_documents_are_written_once_with_their_header(tmp_path):
    doc = {"name": "iommu.json", "schema": "serving-rollout.iommu/v1", "body": {"enabled": False}}
    assert observations.write_documents(str(tmp_path / "run"), "host-1", "20261130T000000Z", [doc]) == ["iommu.json"]
    path = tmp_path / "run" / "iommu.json"
    assert json.loads(path.read_text()) == {"schema": "serving-rollout.iommu/v1", "host": "host-1",
                                            "run_id": "20261130T000000Z", "enabled": False}
    assert oct(path.stat().st_mode & 0o777) == "0o640"
    with pytest.raises(observations.WriteError, match="already exists: a run folder is never overwritten"):
        observations.write_documents(str(tmp_path / "run"), "host-1", "20261130T000000Z",
                                     [{**doc, "body": {"enabled": True}}])
    assert json.loads(path.read_text())["enabled"] is False


def test_bad_names_kinds_and_run_ids_are_named_before_writing():
    found = observations.problems("Capture", "../r", [{"name": "../escape.json", "schema": "s", "body": {}}])
    assert found == ['run id "../r" must be a plain name (1-80 letters, digits, \'_\', \'.\', \'-\')',
                     "kind 'Capture' must be lower-case",
                     "document names must be <lower-case>.json, got ['../escape.json']",
                     "schemas must be serving-rollout.<name>/vN, got ['s']"]
    assert observations.problems("capture", "r1", []) == ["no documents to write"]


def test_secrets_and_on_request_host_identifiers_never_reach_a_document(tmp_path):
    doc = {"name": "recipes.json", "schema": "serving-rollout.recipes/v1",
           "body": {"HF_TOKEN": "hf_abc", "exec": "serve --api-key sk-1", "seen_on": "gpu-node-7"}}
    observations.write_documents(str(tmp_path), "gpu-node-7", "r1", [doc], identifiers=["gpu-node-7"])
    text = (tmp_path / "recipes.json").read_text()
    assert "hf_abc" not in text and "sk-1" not in text and "gpu-node-7" not in text
    assert json.loads(text)["host"] == "<id-0>"


def test_a_full_disk_is_named_and_leaves_no_partial_document(tmp_path, monkeypatch):
    def full(*_):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(observations.os, "fdopen", full)
    with pytest.raises(observations.WriteError, match="cannot write .*a.json: No space left on device"):
        observations.write_documents(str(tmp_path), "h", "r1", [{"name": "a.json", "schema": "serving-rollout.a/v1",
                                                                  "body": {}}])
    assert list(tmp_path.iterdir()) == []
