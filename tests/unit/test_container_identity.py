"""The restored container's identity check, against real `podman inspect` output on this machine."""

import os
import shutil
import subprocess
import uuid

import pytest
from conftest import REPO

from serving_rollout.module_utils.container_truth import identity_problems as container_identity_problems
from serving_rollout.module_utils.container_truth import inspect_identity_argv

IMAGE = "localhost/serving-rollout-lab"
ENV = {**os.environ, "CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}


def podman(*args):
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=ENV, check=True).stdout.strip()


@pytest.fixture(scope="module")
def lab_image_digest():
    if not shutil.which("podman"):
        pytest.fail("podman is missing: bin/setup installs it")
    digests = podman("images", "--digests", "--format", "{{.Tag}} {{.Digest}}", IMAGE).splitlines()
    found = [line.split()[1] for line in digests if line.split()[0] == "bookworm-ssh-podman"]
    assert found, digests
    return found[0]


def inspect_as_prove_does(reference):
    name = f"identity-{uuid.uuid4().hex[:8]}"
    podman("create", "--name", name, reference, "/bin/true")
    try:
        # the exact command the restoration proof runs (action_plugins/restored_proof.py)
        return name, podman(*inspect_identity_argv("podman", name)[1:])
    finally:
        podman("rm", "-f", name)


def test_container_started_by_digest_passes(lab_image_digest):
    name, line = inspect_as_prove_does(f"{IMAGE}@{lab_image_digest}")
    assert container_identity_problems(line, name, f"{IMAGE}@{lab_image_digest}") == []
    # Pinned by digest: the same digest under another name for the repository still matches.
    assert container_identity_problems(line, name, f"registry.example/lab@{lab_image_digest}") == []


def test_container_started_by_tag_passes_against_the_same_tag(lab_image_digest):
    name, line = inspect_as_prove_does(f"{IMAGE}:bookworm-ssh-podman")
    assert container_identity_problems(line, name, f"{IMAGE}:bookworm-ssh-podman") == []
    assert container_identity_problems(line, name, "serving-rollout-lab:bookworm-ssh-podman") == []
    assert container_identity_problems(line, name, f"{IMAGE}:bookworm")[0].startswith(
        f"container runs {IMAGE}:bookworm-ssh-podman (image ")


def test_wrong_name_or_image_by_tag_is_named(lab_image_digest):
    name, line = inspect_as_prove_does(f"{IMAGE}:bookworm-ssh-podman")
    problems = container_identity_problems(line, "sglang", f"{IMAGE}@{lab_image_digest}")
    assert problems[0] == f"container is named {name}, expected sglang"
    assert problems[1].startswith(f"container runs {IMAGE}:bookworm-ssh-podman (image ")


def test_docker_style_name_and_bad_input():
    digest = "sha256:" + "a" * 64
    pinned = f"lmsysorg/sglang@{digest}"
    assert container_identity_problems(f"/sglang sha256:{'b' * 64} {pinned}", "sglang", pinned) == []
    with pytest.raises(ValueError, match="got 'only-two words'"):
        container_identity_problems("only-two words", "sglang", pinned)
    with pytest.raises(ValueError, match="got 'sglang' and None"):
        container_identity_problems(f"/sglang x lmsysorg/sglang@{digest}", "sglang", None)
