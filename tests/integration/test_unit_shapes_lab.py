"""Unit shapes on the lab host: a template instance rolled out and restored byte-exact (its
candidate reads the instance's own files), and refusals with the true reason before any change."""

import json
import re
import tempfile
from pathlib import Path

import pytest
import testinfra
from conftest import LAB_HOST, lab, run_playbook
from restored import restored_problems

LAB = LAB_HOST  # this test worker's lab host (conftest)
PORT = 30031
TEMPLATE = f"""[Unit]
Description=SGLang %i (template, engine double)

[Service]
EnvironmentFile=/etc/sglang/%i.env
EnvironmentFile=/etc/sglang/engine-double.env
Environment=NCCL_P2P_DISABLE=1
ExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --model-path ${{MODEL}} \\
  --revision 2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4 --tp-size ${{TENSOR_PARALLEL_SIZE}} \\
  --context-length 32768 --host 127.0.0.1 --port {PORT} --api-key ${{SGLANG_API_KEY}}

[Install]
WantedBy=multi-user.target
"""
INSTANCE_ENV = "MODEL=Qwen/Qwen3-235B-A22B-Instruct-2507-FP8\nTENSOR_PARALLEL_SIZE=4\nSGLANG_API_KEY=tmpl-key-51ac\n"


def roll_out(unit, port, prefix, **extra):
    """candidate.yml on the lab host against `unit` (its double on `port`), small cells; the
    result and the evidence folder."""
    evidence = tempfile.mkdtemp(prefix=prefix)
    result = run_playbook("candidate.yml", {
        "serving_recipe_unit": unit, "rollout_engine_port": port,
        "rollout_gpu_process_pattern": f"engine_double.py .*--port {port}", "rollout_evidence_dir": evidence,
        "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_requests": 2, **extra},
        inventory="inventory/lab", local=False)
    return result, evidence


@pytest.fixture
def template_unit():
    lab("sh", "-c", "cat > /etc/sglang/qwen.env && chmod 600 /etc/sglang/qwen.env", stdin=INSTANCE_ENV)
    lab("sh", "-c", "cat > /etc/systemd/system/sglang@.service", stdin=TEMPLATE)
    lab("sh", "-c", "systemctl daemon-reload && systemctl enable --now sglang@qwen.service")
    yield
    lab("sh", "-c", "systemctl disable --now sglang@qwen.service; rm -rf /etc/systemd/system/sglang@.service "
                    "/etc/sglang/qwen.env /var/lib/serving-rollout/sglang@qwen.service* "
                    "/etc/systemd/system/sglang@qwen-candidate.service; systemctl daemon-reload", check=False)


def test_template_instance_rolls_out_and_restores_byte_exact(template_unit):
    before = lab("sha256sum", "/etc/systemd/system/sglang@.service", "/etc/sglang/qwen.env").stdout
    expected = {"model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "tp_size": 4, "context_length": 32768,
                "nccl_version": "2.28.9"}
    result, evidence = roll_out("sglang@qwen.service", PORT, "template-evidence-", serving_expected=expected)
    assert result.returncode == 0, result.stdout[-4000:]
    assert lab("sha256sum", "/etc/systemd/system/sglang@.service", "/etc/sglang/qwen.env").stdout == before
    state = lab("systemctl", "show", "-p", "ActiveState,NRestarts", "sglang@qwen.service").stdout
    assert "ActiveState=active" in state and "NRestarts=0" in state
    recipes = json.loads(next(__import__("pathlib").Path(evidence).rglob("recipes.json")).read_text())
    assert restored_problems(testinfra.get_host(f"podman://{LAB}"), "sglang@qwen.service",
                             recipes["original_files"]) == []
    original = recipes["original"]
    assert original["tp_size"] == "4" and original["model"] == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"
    assert original["shape"]["template"] is True and original["shape"]["instance"] == "qwen"
    assert "/etc/sglang/qwen.env" in original["env_files"]
    assert "tmpl-key-51ac" not in json.dumps(recipes)


@pytest.mark.parametrize("unit_text, reason", [
    ("[Service]\nExecStart=/opt/serve/launch.sh\n", "runs a wrapper script (/opt/serve/launch.sh)"),
    (f"[Service]\nExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --tp-size 2 --nnodes 2 "
     f"--port {PORT}\n", "runs a multi-node engine (--nnodes 2)"),
])
def test_refused_shapes_name_the_true_reason_before_any_change(unit_text, reason):
    lab("sh", "-c", "cat > /etc/systemd/system/shape-test.service && systemctl daemon-reload", stdin=unit_text)
    try:
        result = run_playbook("candidate-render.yml", {"serving_recipe_unit": "shape-test.service"},
                              inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0 and f"shape-test.service refused: shape-test.service {reason}" in text, \
            text[-2000:]
        assert lab("test", "-e", "/etc/systemd/system/shape-test-candidate.service", check=False).returncode == 1
    finally:
        lab("sh", "-c", "rm -rf /etc/systemd/system/shape-test.service /var/lib/serving-rollout/shape-test.service; "
                        "systemctl daemon-reload", check=False)


EF_PORT = 30032
EF_UNIT = f"""[Unit]
Description=SGLang with its NCCL settings in an EnvironmentFile (engine double)

[Service]
EnvironmentFile=/etc/sglang-ef/nccl.env
EnvironmentFile=/etc/sglang/engine-double.env
ExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --model-path Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 \\
  --revision 2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4 --tp-size 2 --context-length 32768 \\
  --host 127.0.0.1 --port {EF_PORT} --api-key ${{SGLANG_API_KEY}}

[Install]
WantedBy=multi-user.target
"""
EF_ENV = "# shared NCCL settings\nNCCL_P2P_DISABLE=1\nNCCL_CUMEM_ENABLE=0\nSGLANG_API_KEY=ef-key-7c2d90\n"


def test_a_control_held_in_an_environment_file_changes_in_the_candidates_own_copy():
    lab("sh", "-c", "mkdir -p /etc/sglang-ef && cat > /etc/sglang-ef/nccl.env && chmod 640 /etc/sglang-ef/nccl.env",
        stdin=EF_ENV)
    lab("sh", "-c", "cat > /etc/systemd/system/sglang-ef.service && systemctl daemon-reload && "
                    "systemctl enable --now sglang-ef.service", stdin=EF_UNIT)
    try:
        before = lab("sha256sum", "/etc/systemd/system/sglang-ef.service", "/etc/sglang-ef/nccl.env").stdout
        result, evidence = roll_out("sglang-ef.service", EF_PORT, "envfile-evidence-")
        assert result.returncode == 0, result.stdout[-4000:]
        # The original unit and its EnvironmentFile are byte for byte as they were; the copy is gone.
        assert lab("sha256sum", "/etc/systemd/system/sglang-ef.service", "/etc/sglang-ef/nccl.env").stdout == before
        copies = "/var/lib/serving-rollout/sglang-ef.service/candidate-env"
        assert lab("test", "-e", copies, check=False).returncode == 1
        run = next(__import__("pathlib").Path(evidence).rglob("rollout-*"))
        recipes = json.loads((run / "recipes.json").read_text())
        assert recipes["difference"] == {"control": "env:NCCL_P2P_DISABLE", "before": "1", "after": "0"}
        assert restored_problems(testinfra.get_host(f"podman://{LAB}"), "sglang-ef.service",
                                 recipes["original_files"]) == []
        journal = json.loads((run / "journal-excerpts.json").read_text())
        assert journal["candidate"]["nccl"]["p2p_in_effect"] and not journal["restored"]["nccl"]["p2p_in_effect"]
        assert "ef-key-7c2d90" not in result.stdout + "".join(p.read_text(errors="replace")
                                                               for p in run.iterdir() if p.suffix != ".png")
    finally:
        lab("sh", "-c", "systemctl disable --now sglang-ef.service; rm -rf /etc/systemd/system/sglang-ef.service "
                        "/etc/sglang-ef /var/lib/serving-rollout/sglang-ef.service*; systemctl daemon-reload",
            check=False)


CTR_PORT = 30033
CTR_IMAGE = "localhost/engine-double:lab"
CTR_NCCL_ENV = "# NCCL settings the container reads (--env-file)\nNCCL_P2P_DISABLE=1\nNCCL_CUMEM_ENABLE=0\n"


def container_unit(digest):
    # The shape of public docker/podman serving units: remove a leftover container first, run in the
    # foreground with --rm, settings in --env-file, the secret passed through from an EnvironmentFile,
    # stop by name. Real podman (runc) inside the lab host; the engine is the double, in an image
    # built on the lab host from its own root and pinned by digest.
    return f"""[Unit]
Description=SGLang in a podman container (engine double)

[Service]
EnvironmentFile=/etc/sglang/sglang.env
ExecStartPre=-/usr/bin/podman rm -f sglang-ctr
ExecStart=/usr/bin/podman run --rm --name sglang-ctr --network host --env-file /etc/sglang-ctr/nccl.env \\
  --env-file /etc/sglang/engine-double.env -e SGLANG_API_KEY {CTR_IMAGE.split(':')[0]}@{digest} \\
  python3 /opt/engine-double/engine_double.py --model-path Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 \\
  --revision 2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4 --tp-size 2 --context-length 32768 \\
  --host 127.0.0.1 --port {CTR_PORT} --api-key ${{SGLANG_API_KEY}}
ExecStop=/usr/bin/podman stop -t 20 sglang-ctr
TimeoutStopSec=40

[Install]
WantedBy=multi-user.target
"""


@pytest.fixture
def podman_unit():
    # The image: the lab host's own Python and the double, with an NCCL setting in its ENV.
    lab("sh", "-c", f"podman rmi -f {CTR_IMAGE} >/dev/null 2>&1; tar -C / -c --exclude=usr/share/doc "
                    "--exclude=usr/share/man --exclude=usr/share/locale --exclude=usr/lib/podman "
                    "usr etc bin sbin lib lib64 opt/engine-double 2>/dev/null "
                    f"| podman import --quiet --change 'ENV NCCL_IB_DISABLE=1' - {CTR_IMAGE}")
    digest = lab("podman", "image", "inspect", "--format", "{{.Digest}}", CTR_IMAGE).stdout.strip()
    lab("sh", "-c", "mkdir -p /etc/sglang-ctr && cat > /etc/sglang-ctr/nccl.env", stdin=CTR_NCCL_ENV)
    lab("sh", "-c", "cat > /etc/systemd/system/sglang-ctr.service && systemctl daemon-reload && "
                    "systemctl enable --now sglang-ctr.service", stdin=container_unit(digest))
    yield digest
    lab("sh", "-c", "systemctl disable --now sglang-ctr.service; podman rm -f sglang-ctr sglang-ctr-candidate; "
                    "rm -rf /etc/systemd/system/sglang-ctr.service /etc/sglang-ctr "
                    f"/var/lib/serving-rollout/sglang-ctr.service*; systemctl daemon-reload; podman rmi -f {CTR_IMAGE}",
        check=False)


def test_a_podman_container_unit_rolls_out_and_restores_the_same_container(podman_unit):
    files = ["/etc/systemd/system/sglang-ctr.service", "/etc/sglang-ctr/nccl.env"]
    before = lab("sha256sum", *files).stdout
    result, evidence = roll_out("sglang-ctr.service", CTR_PORT, "container-evidence-")
    assert result.returncode == 0, result.stdout[-4000:]
    # Restored byte for byte, the same container name on the same image digest, no candidate left.
    assert lab("sha256sum", *files).stdout == before
    state = lab("systemctl", "show", "-p", "ActiveState,NRestarts", "sglang-ctr.service").stdout
    assert "ActiveState=active" in state and "NRestarts=0" in state
    inspect = lab("podman", "inspect", "--format", "{{.Name}} {{.Config.Image}}", "sglang-ctr").stdout.split()
    assert inspect == ["sglang-ctr", f"{CTR_IMAGE.split(':')[0]}@{podman_unit}"]
    assert lab("podman", "container", "exists", "sglang-ctr-candidate", check=False).returncode == 1
    assert lab("test", "-e", "/var/lib/serving-rollout/sglang-ctr.service/candidate-env", check=False).returncode == 1
    run = next(__import__("pathlib").Path(evidence).rglob("rollout-*"))
    recipes = json.loads((run / "recipes.json").read_text())
    assert recipes["difference"] == {"control": "env:NCCL_P2P_DISABLE", "before": "1", "after": "0"}
    assert restored_problems(testinfra.get_host(f"podman://{LAB}"), "sglang-ctr.service",
                             recipes["original_files"]) == []
    assert "/etc/sglang-ctr/nccl.env" in [f["path"] for f in recipes["original_files"]]
    original = recipes["original"]
    assert original["runtime"] == "podman" and original["image_digest"] == podman_unit
    # The image's ENV and the --env-file are both NCCL sources the recipe shows.
    sources = {s["source"]: s["values"] for s in original["nccl_config"]["sources"]}
    assert sources["image-env"] == {"NCCL_IB_DISABLE": "1"}
    assert sources["process-env"]["NCCL_P2P_DISABLE"] == "1"
    journal = json.loads((run / "journal-excerpts.json").read_text())
    assert journal["candidate"]["nccl"]["p2p_in_effect"] and not journal["restored"]["nccl"]["p2p_in_effect"]
    assert "lab-secret-6f1d0c9e2b7a4e58" not in result.stdout + "".join(
        p.read_text(errors="replace") for p in run.iterdir() if p.suffix != ".png")

    # Only the runtime sees what a container finally got: a variable added to its --env-file after the
    # original's container started reaches the candidate (its copy of that file), never the running
    # original. systemd's readings of the two units still differ in the one control; the runtime's do
    # not: refused after the candidate's start, the original restored. (The operator re-adopts the
    # edited original first, as renew.yml would.)
    lab("sh", "-c", "echo PLANTED_BY_TEST=1 >> /etc/sglang-ctr/nccl.env; "
                    "rm -rf /var/lib/serving-rollout/sglang-ctr.service")
    planted = lab("sha256sum", *files).stdout
    refused, _ = roll_out("sglang-ctr.service", CTR_PORT, "container-evidence-")
    text = re.sub(r"\s+", " ", refused.stdout)
    assert refused.returncode != 0, text[-3000:]
    assert "container sglang-ctr-candidate is not the original's with one control changed, as podman runs both" in text
    assert "env PLANTED_BY_TEST" in text and "failed and the original was restored and proven" in text, text[-3000:]
    assert lab("sha256sum", *files).stdout == planted
    assert lab("podman", "container", "exists", "sglang-ctr-candidate", check=False).returncode == 1
    state = lab("systemctl", "show", "-p", "ActiveState,NRestarts", "sglang-ctr.service").stdout
    assert "ActiveState=active" in state and "NRestarts=0" in state


def test_an_engine_image_upgrade_is_one_control_proven_by_the_engines_version_and_restored(podman_unit):
    # A new image of the same engine (the double again, reporting 0.5.6 from its image's ENV), pinned by
    # digest: the catalog's engine-image, as an operator upgrades SGLang's image one host at a time.
    lab("sh", "-c", "tar -C / -c --exclude=usr/share/doc --exclude=usr/share/man --exclude=usr/share/locale "
                    "--exclude=usr/lib/podman usr etc bin sbin lib lib64 opt/engine-double 2>/dev/null | podman import "
                    "--quiet --change 'ENV NCCL_IB_DISABLE=1' --change 'ENV DOUBLE_VERSION=0.5.6' - "
                    "localhost/engine-double:upgrade")
    digest = lab("podman", "image", "inspect", "--format", "{{.Digest}}",
                 "localhost/engine-double:upgrade").stdout.strip()
    new = f"localhost/engine-double@{digest}"
    files = ["/etc/systemd/system/sglang-ctr.service", "/etc/sglang-ctr/nccl.env"]
    before = lab("sha256sum", *files).stdout
    try:
        result, evidence = roll_out("sglang-ctr.service", CTR_PORT, "upgrade-evidence-",
                                    serving_recipe_candidate_id="engine-image", serving_recipe_control_value=new)
        assert result.returncode == 0, result.stdout[-4000:]
        run = next(Path(evidence).rglob("rollout-*"))
        recipes = json.loads((run / "recipes.json").read_text())
        difference = recipes["difference"]
        assert difference["control"] == "image" and difference["after"] == new, difference
        decision = json.loads((run / "decision.json").read_text())
        assert decision["versions"]["original"]["engine"] == "0.5.5", decision["versions"]
        candidate = decision["versions"]["candidate"]
        assert {k: candidate[k] for k in ("engine", "nccl", "image", "build")} == \
            {"engine": "0.5.6", "nccl": ["2.28.9"], "image": new, "build": None}, candidate  # its build is its image
        gates = {r["gate"] for r in json.loads((run / "gates.json").read_text())["candidate"]}
        assert {"smoke", "json", "needle", "tool_call", "contract"} <= gates, gates  # every gate, for an upgrade
        card = (run / "result-card.md").read_text()
        assert "Engine upgrade (each side's own report): engine 0.5.5 -> 0.5.6" in card, card
        # Restored: the same container name on the original image's digest, the files byte for byte.
        assert lab("sha256sum", *files).stdout == before
        inspect = lab("podman", "inspect", "--format", "{{.Name}} {{.Config.Image}}", "sglang-ctr").stdout.split()
        assert inspect == ["sglang-ctr", f"{CTR_IMAGE.split(':')[0]}@{podman_unit}"]
    finally:
        lab("podman", "rmi", "-f", "localhost/engine-double:upgrade", check=False)


def test_a_raw_template_is_refused_with_systemds_own_words_and_the_empty_specifier_named():
    """The template itself (sglang@.service, %i empty) as the serving unit: systemd 252 will not even show it. The
    refusal carries systemd's words and says what they mean (the instance name is empty), before any change. (A
    probe that fails on a path an empty specifier left is read from its journal: tests/unit/test_systemd_shapes.)"""
    lab("sh", "-c", "cat > /etc/systemd/system/sglang@.service && systemctl daemon-reload", stdin=TEMPLATE)
    try:
        result = run_playbook("candidate-render.yml", {"serving_recipe_unit": "sglang@.service"},
                              inventory="inventory/lab", local=False)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        # systemd's own words, and what they mean for a template
        assert "Unit name sglang@.service is neither a valid invocation ID nor unit name" in text, text[-3000:]
        assert "sglang@.service is a template: its %i (the instance name) is empty; adopt an instance " \
               "(sglang@NAME.service)" in text, text[-3000:]
        assert lab("test", "-e", "/etc/systemd/system/sglang@-candidate.service", check=False).returncode == 1
    finally:
        lab("sh", "-c", "rm -rf /etc/systemd/system/sglang@.service /var/lib/serving-rollout/sglang@.service; "
                        "systemctl daemon-reload", check=False)


def test_a_load_warning_unrelated_to_the_engine_is_shown_and_never_blocks():
    """An official-image unit's Restart=unless-stopped (a Docker word systemd 252 ignores with a warning) and a
    stray first line systemd ignores: the candidate is rendered, proven one control away, and the warning said."""
    text = ("vi /etc/systemd/system/shape-warn.service\n[Unit]\nDescription=warning shape\n[Service]\n"
            "Restart=unless-stopped\nEnvironment=NCCL_P2P_DISABLE=1\n"
            "ExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --model-path Qwen/Qwen3-8B "
            f"--tp-size 2 --host 127.0.0.1 --port {PORT}\n")
    lab("sh", "-c", "cat > /etc/systemd/system/shape-warn.service && systemctl daemon-reload", stdin=text)
    try:
        result = run_playbook("candidate-render.yml", {"serving_recipe_unit": "shape-warn.service",
                                                       "serving_recipe_require_serving": False},
                              inventory="inventory/lab", local=False)
        out = re.sub(r"\s+", " ", result.stdout + result.stderr)  # Ansible's warnings go to stderr
        assert result.returncode == 0, out[-3000:]
        assert "Failed to parse service restart specifier, ignoring: unless-stopped" in out, out[-3000:]
        candidate = lab("cat", "/etc/systemd/system/shape-warn-candidate.service").stdout
        assert "NCCL_P2P_DISABLE=0" in candidate
    finally:
        lab("sh", "-c", "rm -rf /etc/systemd/system/shape-warn.service "
                        "/etc/systemd/system/shape-warn-candidate.service /var/lib/serving-rollout/shape-warn.service; "
                        "systemctl daemon-reload", check=False)
