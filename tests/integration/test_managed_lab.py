"""Managed mode on the lab host: a unit converged from the inventory's serving recipe (process and
container; a Quadlet rendered as text where podman has no generator), a candidate rendered from the
recipe rolled out and restored, promotion as an inventory patch that a re-converge renders (changed
once, then 0), and adopt -> managed for the lab's adopted shapes, judged in systemd's reading."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import CPU_SHARED_WITH_OTHER_JOBS, LAB_HOST, REPO, lab, run_playbook
from test_unit_shapes_lab import CTR_IMAGE, EF_ENV, EF_PORT, EF_UNIT, INSTANCE_ENV, TEMPLATE, container_unit

LAB = LAB_HOST
PORT = 30051
UNIT = "sglang-managed.service"
CANDIDATE = "sglang-managed-candidate.service"
SECRET = "lab-secret-6f1d0c9e2b7a4e58"  # the lab's API key (roles/lab_serving_host), never in a recipe
PROCESS_RECIPE = {
    "unit": UNIT, "engine": "sglang",
    "runtime": {"kind": "process", "python": "/usr/bin/python3", "script": "/opt/engine-double/engine_double.py"},
    "model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "revision": "2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4",
    "tp": 2, "context": 32768, "host": "127.0.0.1", "port": PORT,
    "environment": {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0"},
    "environment_files": ["/etc/sglang/sglang.env", "/etc/sglang/engine-double.env"],
    "engine_args": {"--disable-custom-all-reduce": True, "--api-key": "${SGLANG_API_KEY}"},
    "unit_settings": {"restart": "on-failure", "restart_sec": 5, "timeout_stop_sec": 30,
                      "limits": {"LimitNOFILE": 65536}, "after": ["network-online.target"],
                      "dropins": {"10-nice.conf": "[Service]\nNice=0\n"}},
}


def inventory(folder, recipe, comment="# The lab's managed serving unit (engine double)\n"):
    """An inventory as an Ansible shop keeps one: the lab host, its group_vars, and the recipe in host_vars."""
    hosts = (REPO / "inventory" / "lab" / "hosts.yml").read_text().replace(
        "{{ inventory_dir }}/../../lab/.ssh/id_ed25519", str(REPO / "lab" / ".ssh" / "id_ed25519"))
    (folder / "hosts.yml").write_text(hosts)
    shutil.copytree(REPO / "inventory" / "lab" / "group_vars", folder / "group_vars", dirs_exist_ok=True)
    (folder / "host_vars").mkdir(exist_ok=True)
    (folder / "host_vars" / "lab-gpu-1.yml").write_text(
        "---\n" + comment + yaml.safe_dump({"serving_unit_recipe": recipe}, sort_keys=False))
    return str(folder)


def converge(inv, check=False, **extra):
    result = run_playbook("converge.yml", extra or None, inventory=inv, local=False, check=check)
    recap = re.search(r"lab-gpu-1\s+: ok=\d+\s+changed=(\d+)", result.stdout)
    return result, int(recap.group(1)) if recap else None


def unit_state(unit=UNIT):
    text = lab("systemctl", "show", "-p", "ActiveState,UnitFileState,NRestarts,FragmentPath", unit).stdout
    return dict(line.split("=", 1) for line in text.splitlines())


def remove(unit, *paths):
    lab("sh", "-c", f"systemctl disable --now {unit}; rm -rf /etc/systemd/system/{unit} /etc/systemd/system/{unit}.d "
                    f"/var/lib/serving-rollout/{unit}* {' '.join(paths)}; systemctl daemon-reload; "
                    "systemctl reset-failed", check=False)


@pytest.fixture
def managed_process(tmp_path):
    yield inventory(tmp_path, PROCESS_RECIPE)
    remove(UNIT, f"/etc/systemd/system/{CANDIDATE}", "/var/lib/serving-rollout/managed",
           "/etc/engine-double/faults/" + CANDIDATE)


def test_a_process_recipe_converges_once_then_changes_nothing_and_check_mode_shows_the_diff(managed_process):
    # A first converge under --check: it would install the unit, and nothing on the host moves.
    dry, _ = converge(managed_process, check=True)
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert lab("test", "-e", f"/etc/systemd/system/{UNIT}", check=False).returncode == 1
    assert lab("test", "-e", f"/var/lib/serving-rollout/managed/{UNIT}/previous", check=False).returncode == 1
    result, changed = converge(managed_process)
    assert result.returncode == 0 and changed and changed > 0, result.stdout[-3000:]
    assert "Verify the staged unit with systemd-analyze" in result.stdout
    state = unit_state()
    assert state["ActiveState"] == "active" and state["UnitFileState"] == "enabled", state
    assert state["FragmentPath"] == f"/etc/systemd/system/{UNIT}"
    unit_text = lab("cat", f"/etc/systemd/system/{UNIT}").stdout
    assert "ExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --model-path" in unit_text
    assert "Environment=NCCL_P2P_DISABLE=1" in unit_text and "${SGLANG_API_KEY}" in unit_text
    assert SECRET not in unit_text  # the secret only by reference (the lab's EnvironmentFile holds it)
    assert lab("cat", f"/etc/systemd/system/{UNIT}.d/10-nice.conf").stdout == "[Service]\nNice=0\n"
    again, changed = converge(managed_process)
    assert again.returncode == 0 and changed == 0, again.stdout[-3000:]
    # A recipe change in check mode with --diff: the unit's diff is shown, nothing on the host moves.
    before = lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout
    recipe = dict(PROCESS_RECIPE, environment={"NCCL_P2P_DISABLE": "0", "NCCL_CUMEM_ENABLE": "0"})
    inventory(Path(managed_process), recipe)
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", managed_process,
               str(REPO / "playbooks" / "converge.yml"), "--check", "--diff"]
    dry = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert "-Environment=NCCL_P2P_DISABLE=1" in dry.stdout and "+Environment=NCCL_P2P_DISABLE=0" in dry.stdout
    assert lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout == before
    # A drop-in taken out of the recipe goes from the host too (the tool's own file, listed when installed).
    settings = {k: v for k, v in PROCESS_RECIPE["unit_settings"].items() if k != "dropins"}
    inventory(Path(managed_process), dict(PROCESS_RECIPE, unit_settings=settings))
    result, changed = converge(managed_process)
    assert result.returncode == 0 and changed and changed > 0, result.stdout[-3000:]
    assert lab("test", "-e", f"/etc/systemd/system/{UNIT}.d/10-nice.conf", check=False).returncode == 1
    assert unit_state()["ActiveState"] == "active"


def test_a_full_disk_mid_converge_puts_every_file_back_and_the_unit_runs_as_before(managed_process):
    """The drop-in folder on a full tmpfs: the unit file is written first, the drop-in then fails with ENOSPC;
    the converge puts the unit file back from its verified copy and fails, naming the error and the file
    put back; the engine, never stopped, serves on. Once the disk has room, the same converge installs it all."""
    assert converge(managed_process)[0].returncode == 0
    dropins = f"/etc/systemd/system/{UNIT}.d"
    before = lab("sh", "-c", f"sha256sum /etc/systemd/system/{UNIT} {dropins}/10-nice.conf").stdout
    # One page of tmpfs, taken by the drop-in itself: any new file's first byte finds no room.
    lab("sh", "-c", f"cp {dropins}/10-nice.conf /tmp/10-nice.conf && mount -t tmpfs -o size=4k tmpfs {dropins} "
                    f"&& cp /tmp/10-nice.conf {dropins}/ && systemctl daemon-reload")
    serving = lab("systemctl", "show", "-p", "InvocationID", "--value", UNIT).stdout
    try:
        settings = dict(PROCESS_RECIPE["unit_settings"], dropins={"10-nice.conf": "[Service]\nNice=1\n"})
        inventory(Path(managed_process), dict(PROCESS_RECIPE, environment={"NCCL_P2P_DISABLE": "0"},
                                              unit_settings=settings))
        result, _ = converge(managed_process)
        text = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        assert re.search(rf"converge of {UNIT} failed at 'Install the rendered files.*No space left on device", text), \
            text[-3000:]
        assert f"Put back from the verified copy in /var/lib/serving-rollout/managed/{UNIT}/previous: " \
               f"/etc/systemd/system/{UNIT}" in text, text[-3000:]
        assert lab("sh", "-c", f"sha256sum /etc/systemd/system/{UNIT} {dropins}/10-nice.conf").stdout == before
        assert lab("systemctl", "show", "-p", "NeedDaemonReload", "--value", UNIT).stdout.strip() == "no"
        # Nothing changed on the host, so the engine kept serving: never restarted for a failed install.
        assert unit_state()["ActiveState"] == "active"
        assert lab("systemctl", "show", "-p", "InvocationID", "--value", UNIT).stdout == serving
        assert "left as it was" in text, text[-3000:]
    finally:
        lab("sh", "-c", f"umount {dropins}; systemctl daemon-reload", check=False)
    result, changed = converge(managed_process)
    assert result.returncode == 0 and changed and changed > 0, result.stdout[-3000:]
    assert lab("cat", f"{dropins}/10-nice.conf").stdout == "[Service]\nNice=1\n"
    assert "Environment=NCCL_P2P_DISABLE=0" in lab("cat", f"/etc/systemd/system/{UNIT}").stdout
    # A render systemd accepts but that will not start (its drop-in's ExecStartPre fails): the restart fails,
    # the files go back (the new drop-in removed), the unit restarts from them, and the run fails saying so.
    installed = lab("sh", "-c", f"sha256sum /etc/systemd/system/{UNIT} {dropins}/10-nice.conf "
                                f"/var/lib/serving-rollout/managed/{UNIT}/installed.json").stdout
    broken = dict(settings, dropins={**settings["dropins"], "20-pre.conf": "[Service]\nExecStartPre=/bin/false\n"})
    inventory(Path(managed_process), dict(PROCESS_RECIPE, environment={"NCCL_P2P_DISABLE": "1"}, unit_settings=broken))
    result, _ = converge(managed_process)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert "failed at 'Restart the running unit, which still runs the files it started from'" in text, text[-3000:]
    assert f"{dropins}/20-pre.conf" in text.split("Put back from the verified copy")[1], text[-3000:]
    assert "brought back to that from the files put back: ok" in text, text[-3000:]
    assert lab("test", "-e", f"{dropins}/20-pre.conf", check=False).returncode == 1
    assert lab("sh", "-c", f"sha256sum /etc/systemd/system/{UNIT} {dropins}/10-nice.conf "
                           f"/var/lib/serving-rollout/managed/{UNIT}/installed.json").stdout == installed
    assert unit_state()["ActiveState"] == "active"
    # A render that starts (systemd says active) but whose engine exits at once: a flag value the engine
    # refuses (its argument parser's error, exit 2). The health wait fails, and the files go back as above.
    serving = lab("systemctl", "show", "-p", "InvocationID", "--value", UNIT).stdout
    refused = dict(PROCESS_RECIPE, environment={"NCCL_P2P_DISABLE": "1"}, unit_settings=settings,
                   engine_args={**PROCESS_RECIPE["engine_args"], "--speculative-num-steps": "many"})
    inventory(Path(managed_process), refused)
    result, _ = converge(managed_process)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert "failed at 'Wait for the engine's health route after this converge started or restarted it'" in text, \
        text[-3000:]
    assert f"/etc/systemd/system/{UNIT}" in text.split("Put back from the verified copy")[1], text[-3000:]
    assert "brought back to that from the files put back: ok" in text, text[-3000:]
    assert "--speculative-num-steps" not in lab("cat", f"/etc/systemd/system/{UNIT}").stdout
    assert lab("sh", "-c", f"sha256sum /etc/systemd/system/{UNIT} {dropins}/10-nice.conf "
                           f"/var/lib/serving-rollout/managed/{UNIT}/installed.json").stdout == installed
    assert unit_state()["ActiveState"] == "active"
    assert lab("systemctl", "show", "-p", "InvocationID", "--value", UNIT).stdout != serving  # restarted back


def test_a_bad_recipe_is_refused_by_path_and_a_secret_inline_never_shown(tmp_path):
    recipe = dict(PROCESS_RECIPE, tp="two", environment={"HF_TOKEN": "hf_inlineSecretValue42"},
                  engine_args={"--api-key": "sk-inline-secret-77"})
    result, _ = converge(inventory(tmp_path, recipe))
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert "$.tp: 'two' is not valid under any of the given schemas" in text, text[-2000:]
    recipe = dict(PROCESS_RECIPE, environment={"HF_TOKEN": "hf_inlineSecretValue42"},
                  engine_args={"--api-key": "sk-inline-secret-77"})
    result, _ = converge(inventory(tmp_path, recipe))
    text = re.sub(r"\s+", " ", result.stdout)
    assert "$.environment.HF_TOKEN: a secret-named variable inline" in text, text[-2000:]
    assert "$.engine_args.--api-key: a secret inline; give it as a $VAR reference" in text
    assert "hf_inlineSecretValue42" not in result.stdout + result.stderr
    assert "sk-inline-secret-77" not in result.stdout + result.stderr
    assert lab("test", "-e", f"/etc/systemd/system/{UNIT}", check=False).returncode == 1  # nothing written


def test_a_managed_candidate_rolls_out_restores_and_promotes_as_an_inventory_patch(managed_process, tmp_path):
    result, _ = converge(managed_process)
    assert result.returncode == 0, result.stdout[-3000:]
    unit_sha = lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout
    # The double's speedup fault makes the candidate 40 % faster: an acceptable decision on a loaded machine too.
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo speedup:0.4 > /etc/engine-double/faults/{CANDIDATE}")
    evidence = tmp_path / "evidence"
    rollout = run_playbook("candidate.yml", {
        "serving_recipe_unit": UNIT, "rollout_engine_port": PORT, "rollout_evidence_dir": str(evidence),
        "rollout_gpu_process_pattern": f"engine_double.py .*--port {PORT}", "rollout_cell_requests": 6,
        **CPU_SHARED_WITH_OTHER_JOBS}, inventory=managed_process, local=False)
    lab("rm", "-f", f"/etc/engine-double/faults/{CANDIDATE}")
    assert rollout.returncode == 0, rollout.stdout[-4000:]
    assert "Render the one-control candidate from the recipe (managed mode" in rollout.stdout
    assert "path: environment.NCCL_P2P_DISABLE" in rollout.stdout
    # Restored exactly: the same file, serving, no candidate left.
    assert lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout == unit_sha
    assert unit_state()["ActiveState"] == "active"
    assert lab("test", "-e", f"/etc/systemd/system/{CANDIDATE}", check=False).returncode == 1
    run = next(evidence.glob("lab-gpu-1/rollout-*"))
    recipes = json.loads((run / "recipes.json").read_text())
    assert recipes["difference"] == {"control": "env:NCCL_P2P_DISABLE", "before": "1", "after": "0"}
    assert recipes["managed"]["unit"] == UNIT and recipes["managed_sha256"]
    assert json.loads((run / "decision.json").read_text())["verdict"] == "acceptable"
    run_id = run.name.removeprefix("rollout-")

    # Promotion writes the patch to host_vars (and shows it); the host is not touched.
    host_vars = Path(managed_process) / "host_vars" / "lab-gpu-1.yml"
    before = host_vars.read_text()
    promoted = run_playbook("promote.yml", {"promotion_evidence_dir": str(evidence), "promotion_run_id": run_id,
                                            "promotion_approved_run_id": run_id, "serving_recipe_unit": UNIT},
                            inventory=managed_process, local=False)
    assert promoted.returncode == 0, promoted.stdout[-3000:]
    assert "PROMOTED in the inventory" in promoted.stdout
    assert host_vars.read_text() == before  # a patch to review, not an edit
    assert lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout == unit_sha
    patch_dir = evidence / "lab-gpu-1" / f"promotion-{run_id}"
    record = json.loads((patch_dir / "promotion.json").read_text())  # a record in every mode
    assert (record["mode"], record["run_id"], record["inventory_written"]) == ("managed", run_id, False), record
    patch = (patch_dir / "inventory.patch").read_text()
    moved = [line for line in patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert moved == ["-    NCCL_P2P_DISABLE: '1'", "+    NCCL_P2P_DISABLE: '0'"], patch
    assert "# The lab's managed serving unit (engine double)" in (patch_dir / "recipe-after.yml").read_text()

    # Applying the inventory again renders the promoted original: changed once (restarted), then 0.
    subprocess.run(["patch", "-p1", "-d", managed_process], input=patch, text=True, check=True, capture_output=True)
    result, changed = converge(managed_process)
    assert result.returncode == 0 and changed and changed > 0, result.stdout[-3000:]
    assert "Environment=NCCL_P2P_DISABLE=0" in lab("cat", f"/etc/systemd/system/{UNIT}").stdout
    state = unit_state()
    assert state["ActiveState"] == "active" and state["NRestarts"] == "0", state
    again, changed = converge(managed_process)
    assert again.returncode == 0 and changed == 0, again.stdout[-3000:]
    # The converge made the promoted unit the restore recipe: rollback.yml restores what the inventory
    # renders now, never the unit before the promotion.
    promoted_sha = lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout
    rollback = run_playbook("rollback.yml", {"serving_recipe_unit": UNIT, "rollout_engine_port": PORT,
                                             "rollout_evidence_dir": str(evidence),
                                             "rollout_gpu_process_pattern": f"engine_double.py .*--port {PORT}"},
                            inventory=managed_process, local=False)
    assert rollback.returncode == 0, rollback.stdout[-3000:]
    assert lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout == promoted_sha
    # Undo: the reverse patch and a converge render the previous recipe's unit byte for byte.
    subprocess.run(["patch", "-p1", "-d", managed_process], input=(patch_dir / "inventory-revert.patch").read_text(),
                   text=True, check=True, capture_output=True)
    result, changed = converge(managed_process)
    assert result.returncode == 0 and changed > 0
    assert lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout == unit_sha


def test_a_managed_candidate_is_refused_when_the_host_was_edited_by_hand(managed_process, tmp_path):
    assert converge(managed_process)[0].returncode == 0
    lab("sh", "-c", f"sed -i 's/RestartSec=5/RestartSec=7/' /etc/systemd/system/{UNIT} && systemctl daemon-reload")
    result = run_playbook("candidate-render.yml", {"serving_recipe_unit": UNIT}, inventory=managed_process,
                          local=False)
    text = re.sub(r"\s+", " ", result.stdout)
    assert result.returncode != 0
    assert f"/etc/systemd/system/{UNIT} is not the render of the inventory's recipe" in text, text[-2000:]
    assert lab("test", "-e", f"/etc/systemd/system/{CANDIDATE}", check=False).returncode == 1


CTR_UNIT = "sglang-mctr.service"
CTR_PORT = 30052


@pytest.fixture
def lab_image():
    # An image made from a host not yet provisioned lacks the double: made again rather than reused.
    lab("sh", "-c", f"podman run --rm {CTR_IMAGE} test -f /opt/engine-double/engine_double.py 2>/dev/null || "
                    f"(podman rmi -f {CTR_IMAGE} >/dev/null 2>&1; tar -C / -c --exclude=usr/share/doc "
                    "--exclude=usr/share/man --exclude=usr/share/locale --exclude=usr/lib/podman "
                    "usr etc bin sbin lib lib64 opt/engine-double 2>/dev/null "
                    f"| podman import --quiet --change 'ENV NCCL_IB_DISABLE=1' - {CTR_IMAGE})")
    yield lab("podman", "image", "inspect", "--format", "{{.Digest}}", CTR_IMAGE).stdout.strip()
    lab("sh", "-c", "podman rm -f sglang-mctr sglang-mctr-candidate; rm -rf /etc/containers/systemd", check=False)
    remove(CTR_UNIT, "/var/lib/serving-rollout/managed")


def container_recipe(digest, output="service"):
    return {"unit": CTR_UNIT, "engine": "sglang",
            "runtime": {"kind": "container", "tool": "podman", "image": f"{CTR_IMAGE.split(':')[0]}@{digest}",
                        "name": "sglang-mctr", "options": ["--network", "host"],
                        "env_files": ["/etc/sglang/engine-double.env"], "pass_env": ["SGLANG_API_KEY"],
                        "command": ["python3", "/opt/engine-double/engine_double.py"], "stop_timeout_s": 20},
            "model": "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "tp": 2, "context": 32768, "host": "127.0.0.1",
            "port": CTR_PORT, "environment": {"NCCL_P2P_DISABLE": "1"},
            "environment_files": ["/etc/sglang/sglang.env"],
            "engine_args": {"--api-key": "${SGLANG_API_KEY}"},
            "unit_settings": {"timeout_stop_sec": 40}, "output": output}


def test_a_container_recipe_converges_and_its_quadlet_is_rendered_and_checked_as_text(lab_image, tmp_path):
    inv = inventory(tmp_path, container_recipe(lab_image))
    result, changed = converge(inv)
    assert result.returncode == 0 and changed > 0, result.stdout[-3000:]
    assert unit_state(CTR_UNIT)["ActiveState"] == "active"
    assert lab("podman", "inspect", "--format", "{{.Name}} {{.ImageDigest}}", "sglang-mctr").stdout.split() == \
        ["sglang-mctr", lab_image]
    assert converge(inv)[1] == 0
    remove(CTR_UNIT)
    # The Quadlet output: this lab's podman (Debian 12's 4.3) has no generator, so the file is rendered,
    # checked as text, installed where podman 4.4+ reads it, and the playbook says so (README).
    inv = inventory(tmp_path, container_recipe(lab_image, "quadlet"))
    result, changed = converge(inv)
    assert result.returncode == 0 and changed > 0, result.stdout[-3000:]
    assert "the Quadlet was rendered and checked as text" in re.sub(r"\s+", " ", result.stdout)
    quadlet = lab("cat", "/etc/containers/systemd/sglang-mctr.container").stdout
    assert f"Image={CTR_IMAGE.split(':')[0]}@{lab_image}" in quadlet and "ContainerName=sglang-mctr" in quadlet
    assert "PodmanArgs=--network host -e SGLANG_API_KEY" in quadlet and SECRET not in quadlet
    assert converge(inv)[1] == 0


# ---- adopt -> managed: the lab's adopted shapes ---------------------------------------------------

def adopt(unit, folder):
    result = run_playbook("adopt-managed.yml", {"serving_recipe_unit": unit, "serving_unit_adopt_dir": str(folder)},
                          inventory="inventory/lab", local=False)
    written = folder / f"managed-recipe-{unit}.yml"
    return result, (yaml.safe_load(written.read_text()) if written.exists() else None)


def test_adopt_the_labs_plain_unit_is_proven_equal_and_its_recipe_converges_to_the_same_unit(tmp_path):
    result, recipe = adopt("sglang.service", tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "EQUAL: the recipe renders sglang.service as systemd runs it" in result.stdout
    recipe = recipe["serving_unit_recipe"]
    assert recipe["engine_args"]["--api-key"] == "${SGLANG_API_KEY}" and SECRET not in json.dumps(recipe)
    assert recipe["environment"]["NCCL_P2P_DISABLE"] == "1" and recipe["tp"] == 2
    assert lab("test", "-e", "/etc/systemd/system/sglang-managed-check.service", check=False).returncode == 1


def test_adopt_an_environment_file_unit_is_proven_equal():
    lab("sh", "-c", "mkdir -p /etc/sglang-ef && cat > /etc/sglang-ef/nccl.env", stdin=EF_ENV)
    lab("sh", "-c", "cat > /etc/systemd/system/sglang-ef.service && systemctl daemon-reload", stdin=EF_UNIT)
    try:
        folder = Path(tempfile.mkdtemp(prefix="adopt-ef-"))
        result, recipe = adopt("sglang-ef.service", folder)
        assert result.returncode == 0, result.stdout[-3000:]
        recipe = recipe["serving_unit_recipe"]
        assert recipe["environment_files"] == ["/etc/sglang-ef/nccl.env", "/etc/sglang/engine-double.env"]
        assert recipe["port"] == EF_PORT and "ef-key-7c2d90" not in json.dumps(recipe)
    finally:
        remove("sglang-ef.service", "/etc/sglang-ef")


# `systemctl edit`'s shape: an override that resets ExecStart and adds settings.
OVERRIDE = f"""[Service]
ExecStart=
ExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --model-path Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 \\
  --revision 2c9ba0a5b9c2d5c7b2a4e1f0a7d3c6e9b8f1a2d4 --tp-size 2 --context-length 32768 \\
  --host 127.0.0.1 --port {EF_PORT} --api-key ${{SGLANG_API_KEY}} --enable-metrics
Restart=always
"""


def test_an_override_drop_in_is_converted_and_converge_refuses_it_until_it_is_gone(tmp_path):
    lab("sh", "-c", "mkdir -p /etc/sglang-ef && cat > /etc/sglang-ef/nccl.env", stdin=EF_ENV)
    lab("sh", "-c", "cat > /etc/systemd/system/sglang-ef.service", stdin=EF_UNIT)
    lab("sh", "-c", "mkdir -p /etc/systemd/system/sglang-ef.service.d && "
                    "cat > /etc/systemd/system/sglang-ef.service.d/override.conf && systemctl daemon-reload",
        stdin=OVERRIDE)
    try:
        result, recipe = adopt("sglang-ef.service", tmp_path)
        assert result.returncode == 0, result.stdout[-3000:]
        assert "EQUAL: the recipe renders sglang-ef.service as systemd runs it" in result.stdout
        recipe = recipe["serving_unit_recipe"]
        assert recipe["engine_args"]["--enable-metrics"] is True and recipe["unit_settings"]["restart"] == "always"
        before = lab("sha256sum", "/etc/systemd/system/sglang-ef.service").stdout
        (tmp_path / "inventory").mkdir()
        inv = inventory(tmp_path / "inventory", recipe)
        result, _ = converge(inv)
        said = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0, said[-3000:]
        assert ("sglang-ef.service: systemd also applies /etc/systemd/system/sglang-ef.service.d/override.conf, "
                "which the recipe does not render") in said, said[-3000:]
        assert lab("sha256sum", "/etc/systemd/system/sglang-ef.service").stdout == before  # nothing changed
        lab("sh", "-c", "rm -rf /etc/systemd/system/sglang-ef.service.d && systemctl daemon-reload")
        result, changed = converge(inv)
        assert result.returncode == 0 and changed > 0, result.stdout[-3000:]
        assert converge(inv)[1] == 0
    finally:
        remove("sglang-ef.service", "/etc/sglang-ef")


def test_adopt_a_template_instance_keeps_its_references_and_is_proven_equal(tmp_path):
    lab("sh", "-c", "cat > /etc/sglang/qwen.env && chmod 600 /etc/sglang/qwen.env", stdin=INSTANCE_ENV)
    lab("sh", "-c", "cat > /etc/systemd/system/sglang@.service && systemctl daemon-reload", stdin=TEMPLATE)
    try:
        result, recipe = adopt("sglang@qwen.service", tmp_path)
        assert result.returncode == 0, result.stdout[-3000:]
        recipe = recipe["serving_unit_recipe"]
        # The instance's values stay where the operator put them: in its EnvironmentFile, referenced.
        assert recipe["model"] == "${MODEL}" and recipe["tp"] == "${TENSOR_PARALLEL_SIZE}", recipe
        assert "/etc/sglang/qwen.env" in recipe["environment_files"] and "tmpl-key-51ac" not in json.dumps(recipe)
    finally:
        lab("sh", "-c", "rm -f /etc/systemd/system/sglang@.service /etc/sglang/qwen.env; systemctl daemon-reload",
            check=False)


def test_adopt_a_podman_container_unit_is_proven_equal(lab_image, tmp_path):
    lab("sh", "-c", "mkdir -p /etc/sglang-ctr && printf 'NCCL_P2P_DISABLE=1\\n' > /etc/sglang-ctr/nccl.env")
    lab("sh", "-c", "cat > /etc/systemd/system/sglang-ctr.service && systemctl daemon-reload",
        stdin=container_unit(lab_image))
    try:
        result, recipe = adopt("sglang-ctr.service", tmp_path)
        assert result.returncode == 0, result.stdout[-3000:]
        runtime = recipe["serving_unit_recipe"]["runtime"]
        assert runtime["image"].endswith(lab_image) and runtime["name"] == "sglang-ctr"
        assert runtime["env_files"] == ["/etc/sglang-ctr/nccl.env", "/etc/sglang/engine-double.env"]
        assert runtime["pass_env"] == ["SGLANG_API_KEY"] and runtime["stop_timeout_s"] == 20
    finally:
        remove("sglang-ctr.service", "/etc/sglang-ctr")


def test_adopt_shows_each_difference_where_the_recipe_cannot_hold_the_unit(tmp_path):
    """A unit that holds its secrets inline (an Environment= token, an --api-key value): the recipe leaves
    them out, so its render differs; each difference is shown and the playbook fails, with the host
    unchanged (no check unit left) and no secret shown."""
    text = ("[Service]\nEnvironment=NCCL_P2P_DISABLE=1\nEnvironment=HF_TOKEN=hf_inlineAdoptSecret99\n"
            "ExecStart=/usr/bin/python3 /opt/engine-double/engine_double.py --model-path m --tp-size 2 "
            "--port 30054 --api-key sk-inlineAdoptKey5\n")
    lab("sh", "-c", "cat > /etc/systemd/system/sglang-inline.service && systemctl daemon-reload", stdin=text)
    try:
        result, recipe = adopt("sglang-inline.service", tmp_path)
        out = re.sub(r"\s+", " ", result.stdout)
        assert result.returncode != 0
        assert "NOT EQUAL" in out and "sets the secret-named HF_TOKEN inline" in out, out[-3000:]
        assert "engine argument --api-key holds a secret inline" in out
        assert "environment HF_TOKEN" in out  # systemd's reading shows where the render differs
        assert "hf_inlineAdoptSecret99" not in result.stdout and "sk-inlineAdoptKey5" not in result.stdout
        assert "hf_inlineAdoptSecret99" not in json.dumps(recipe) and "sk-inlineAdoptKey5" not in json.dumps(recipe)
        assert lab("test", "-e", "/etc/systemd/system/sglang-inline-managed-check.service",
                   check=False).returncode == 1
    finally:
        remove("sglang-inline.service")


def test_the_fleet_runner_and_the_plan_executor_roll_out_a_managed_unit(managed_process, tmp_path):
    """bin/serving-rollout's fleet run (canary) and plan executor, on a host whose unit the inventory renders:
    the candidates come from the recipe, the original is restored byte for byte after each."""
    assert converge(managed_process)[0].returncode == 0
    unit_sha = lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout
    lab("sh", "-c", f"mkdir -p /etc/engine-double/faults && echo speedup:0.5 > /etc/engine-double/faults/{CANDIDATE}")
    extra = json.dumps({"serving_recipe_unit": UNIT, "rollout_engine_port": PORT,
                        "rollout_gpu_process_pattern": f"engine_double.py .*--port {PORT}",
                        "rollout_cells": [{"name": "1k", "prompt_tokens": 1000}], "rollout_cell_requests": 4,
                        **CPU_SHARED_WITH_OTHER_JOBS})
    cli = [str(REPO / "bin" / "serving-rollout")]
    fleet = subprocess.run(cli + ["run", "candidate", "-i", managed_process, "--canary", "1", "--evidence",
                                  str(tmp_path / "fleet"), "-e", extra],
                           cwd=REPO, capture_output=True, text=True, timeout=900)
    assert fleet.returncode == 0, fleet.stdout[-4000:] + fleet.stderr[-2000:]
    assert any(line.startswith("lab-gpu-1: acceptable") for line in fleet.stdout.splitlines()), fleet.stdout[-3000:]
    run = next((tmp_path / "fleet").glob("lab-gpu-1/rollout-*"))
    assert json.loads((run / "recipes.json").read_text())["managed"]["unit"] == UNIT
    assert lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout == unit_sha

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"schema": "anvil-serving.followup-candidate-plan/v1", "ordered_candidates": [
        {"id": "p2p", "change": "NCCL_P2P_DISABLE=1 -> 0", "gate": "all gates, bracketed cells"},
        {"id": "scheduler-and-speculation", "change": "--chunked-prefill-size 4096", "gate": "all gates",
         "control": {"chunked_prefill_size": 4096}}]}))
    executed = subprocess.run(cli + ["plan", str(plan), "-i", managed_process, "--evidence", str(tmp_path / "plan"),
                                     "-e", extra], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert executed.returncode == 0, executed.stdout[-4000:] + executed.stderr[-2000:]
    doc = json.loads(next((tmp_path / "plan").glob("plan-*/report.json")).read_text())
    assert [(c["id"], c["status"], c.get("outcome")) for c in doc["candidates"]] == [
        ("p2p", "decided", "acceptable"), ("scheduler-and-speculation", "decided", "acceptable")], doc
    second = json.loads(Path(doc["candidates"][1]["hosts"][0]["evidence"], "recipes.json").read_text())
    # One control from the recipe, never stacked on the first candidate's (P2P stays disabled).
    assert second["difference"]["control"] == "arg:--chunked-prefill-size", second["difference"]
    assert second["managed"]["environment"]["NCCL_P2P_DISABLE"] == "1"  # the inventory's recipe, unchanged
    assert lab("sha256sum", f"/etc/systemd/system/{UNIT}").stdout == unit_sha
