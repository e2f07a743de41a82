"""The differential proof over systemd's own readings (real busctl output of the lab's unit as the
original; candidates derived from it as systemd would read them)."""

import copy
import json

from conftest import FIXTURES

from serving_rollout.module_utils import unit_oracle
from serving_rollout.module_utils.unit_oracle import differences, one_control_proof, parse_show, reading

REAL = json.loads((FIXTURES / "systemd" / "busctl-sglang-service.json").read_text())
ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "SGLANG_API_KEY": "hmac:1f2e", "PATH": "hmac:aa"}
SETTINGS = parse_show("User=root\nLimitNOFILE=1048576\nTimeoutStopUSec=30s\nMainPID=4242\nId=sglang.service\n"
                      "Description=SGLang\nExecMainStartTimestamp=Tue 2026-12-01 16:11:00 UTC\n")


def unit(exec_start=None, environment=None, env=None, settings=None, files=None, argv=None):
    start = exec_start if exec_start is not None else REAL["ExecStart"]["data"]
    return reading({"ExecStart": start}, environment if environment is not None else REAL["Environment"]["data"],
                   files if files is not None else REAL["EnvironmentFiles"]["data"],
                   settings if settings is not None else SETTINGS, env if env is not None else ENV,
                   argv if argv is not None else start[0][1][1:])


def with_argv(words):
    start = copy.deepcopy(REAL["ExecStart"]["data"])
    start[0][1] = words
    return start


P2P = {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}
CUSTOM_AR = {"kind": "arg", "name": "--disable-custom-all-reduce", "value": None}


def test_the_same_unit_read_twice_differs_in_nothing_and_proves_no_change():
    proof = one_control_proof(differences(unit(), unit()), P2P)
    assert not proof["ok"] and not proof["seen"] and proof["unexplained"] == []


def test_set_valued_dependencies_printed_in_another_order_are_no_difference():
    """systemd 252 prints Requires= and Wants= in an order that changes across daemon-reloads (issue 49)."""
    first = parse_show("User=root\nRequires=system.slice docker.service sysinit.target\nWants=network-online.target\n")
    again = parse_show("User=root\nRequires=sysinit.target system.slice docker.service\nWants=network-online.target\n")
    assert differences(unit(settings=first), unit(settings=again)) == []
    fewer = parse_show("User=root\nRequires=sysinit.target system.slice\nWants=network-online.target\n")
    (diff,) = differences(unit(settings=first), unit(settings=fewer))
    assert diff["what"] == "setting Requires", diff  # a dependency really gone still counts


def test_identity_and_runtime_state_are_not_differences():
    other = parse_show("User=root\nLimitNOFILE=1048576\nTimeoutStopUSec=30s\nMainPID=0\nId=sglang-candidate.service\n"
                       "Description=Candidate\nExecMainStartTimestamp=n/a\n")
    assert differences(unit(), unit(settings=other)) == []


def test_an_env_control_changed_in_the_effective_environment_is_the_one_control():
    candidate = unit(environment=["NCCL_P2P_DISABLE=0", "NCCL_CUMEM_ENABLE=0", "NCCL_NVLS_ENABLE=0"],
                     env={**ENV, "NCCL_P2P_DISABLE": "0"})
    proof = one_control_proof(differences(unit(), candidate), P2P)
    assert proof["ok"] and proof["seen"], proof


def test_a_second_variable_only_systemd_sees_is_named():
    """A drop-in the project's parser never read (or an EnvironmentFile it read differently) sets a second
    variable: systemd's effective environment shows it, and the proof names it."""
    candidate = unit(env={**ENV, "NCCL_P2P_DISABLE": "0", "NCCL_ALGO": "Tree"})
    proof = one_control_proof(differences(unit(), candidate), P2P)
    assert not proof["ok"]
    assert [d["what"] for d in proof["unexplained"]] == ["environment NCCL_ALGO"]


def test_a_flag_removed_with_a_glued_word_is_two_changes():
    """A template glued 'Restart=always' onto the flag's line: systemd passes it as a word, and a
    candidate that drops the flag and that word changes two things."""
    words = REAL["ExecStart"]["data"][0][1]
    glued = words[:10] + ["--disable-custom-all-reduce", "Restart=always"] + words[11:]
    proof = one_control_proof(differences(unit(exec_start=with_argv(glued), argv=glued[1:]),
                                          unit(exec_start=with_argv(words[:10] + words[11:]),
                                               argv=(words[:10] + words[11:])[1:])), CUSTOM_AR)
    assert not proof["ok"]
    assert any(e["word"] == "Restart=always" for d in proof["unexplained"] for e in d["edits"]), proof


def test_removing_the_flag_alone_is_the_one_control():
    words = REAL["ExecStart"]["data"][0][1]
    without = [w for w in words if w != "--disable-custom-all-reduce"]
    proof = one_control_proof(differences(unit(), unit(exec_start=with_argv(without), argv=without[1:])), CUSTOM_AR)
    assert proof["ok"], proof


def test_a_changed_setting_or_an_optional_env_file_is_named():
    settings = dict(SETTINGS, LimitNOFILE="1024")
    files = [["/etc/sglang/sglang.env", True], ["/etc/sglang/engine-double.env", False]]
    diffs = differences(unit(), unit(settings=settings, files=files, env={**ENV, "NCCL_P2P_DISABLE": "0"}))
    whats = [d["what"] for d in one_control_proof(diffs, P2P)["unexplained"]]
    assert "setting LimitNOFILE" in whats and any(w.startswith("EnvironmentFiles") for w in whats), whats


def test_a_container_candidates_own_name_is_its_identity_not_a_change():
    base = ["/usr/bin/podman", "run", "--rm", "--name", "sglang-ctr", "-e", "NCCL_P2P_DISABLE=1", "img@sha256:ab"]
    cand = ["/usr/bin/podman", "run", "--rm", "--name", "sglang-ctr-candidate", "-e", "NCCL_P2P_DISABLE=0",
            "img@sha256:ab"]
    original = unit(exec_start=with_argv(base), argv=base[1:])
    diffs = differences(original, unit(exec_start=with_argv(cand), argv=cand[1:]))
    assert one_control_proof(diffs, P2P, container="sglang-ctr")["ok"]
    other = cand[:6] + ["NCCL_P2P_DISABLE=0", "-e", "NCCL_ALGO=Tree"] + cand[7:]
    diffs = differences(original, unit(exec_start=with_argv(other), argv=other[1:]))
    assert not one_control_proof(diffs, P2P, container="sglang-ctr")["ok"]


def test_the_candidates_container_name_in_every_exec_line_is_its_identity():
    """A podman unit names its container in ExecStartPre (rm -f) and ExecStop (stop) too."""
    def container_unit(name, p2p):
        run = ["/usr/bin/podman", "run", "--rm", "--name", name, "-e", f"NCCL_P2P_DISABLE={p2p}", "img@sha256:ab"]
        times = [0] * 7
        lines = {"ExecStart": with_argv(run),
                 "ExecStartPre": [["/usr/bin/podman", ["/usr/bin/podman", "rm", "-f", name], True, *times]],
                 "ExecStop": [["/usr/bin/podman", ["/usr/bin/podman", "stop", "-t", "20", name], False, *times]]}
        return reading(lines, [], [], SETTINGS, ENV, run[1:])
    diffs = differences(container_unit("sglang-ctr", 1), container_unit("sglang-ctr-candidate", 0))
    assert one_control_proof(diffs, P2P, container="sglang-ctr")["ok"], diffs
    other = container_unit("sglang-ctr-candidate", 0)
    other["exec"]["ExecStop"][0]["argv"] = ["/usr/bin/podman", "stop", "-t", "5", "sglang-ctr-candidate"]
    proof = one_control_proof(differences(container_unit("sglang-ctr", 1), other), P2P, container="sglang-ctr")
    assert not proof["ok"] and [d["what"] for d in proof["unexplained"]] == ["ExecStop[0] argv"]


def test_an_unknown_key_systemd_ignores_blocks_only_when_it_names_what_the_engine_runs():
    """systemd 252's own words (systemd-analyze verify on the lab host): an unrelated key, a bad value systemd
    ignores (an official image's Restart=unless-stopped) and a line without '=' are warnings shown; a misspelt
    Environment= (the engine's environment lost) or a warning naming the engine's command, environment or limits
    blocks. (A line without '=' that was meant as part of ExecStart still refuses: the argv systemd loaded differs
    from the file's, a finding of its own.)"""
    from serving_rollout.module_utils.unit_oracle import load_warning_blocks

    assert not load_warning_blocks("/tmp/uk-test.service:4: Unknown key 'StartLimitIntervalSec' in section "
                                   "[Service], ignoring.")
    assert load_warning_blocks("/tmp/uk-test.service:5: Unknown key 'Enviroment' in section [Service], ignoring.")
    assert not load_warning_blocks("/etc/systemd/system/shape-trail.service:4: Missing '=', ignoring line.")
    assert not load_warning_blocks("/etc/systemd/system/vllm.service:11: Failed to parse service restart specifier, "
                                   "ignoring: unless-stopped")
    assert load_warning_blocks("/etc/systemd/system/vllm.service:7: EnvironmentFile= path is not absolute, "
                               "ignoring: vllm.env")
    assert load_warning_blocks("/etc/systemd/system/vllm.service:9: Failed to parse resource value, ignoring: "
                               "LimitNOFILE=many")


def test_only_what_decides_the_engine_refuses_a_candidate_the_rest_is_a_warning():
    """Issue 49: the oracle compares what decides what the engine runs and with what; a setting outside it (a
    restart policy, a stop timeout) is named as a warning, never a second control."""
    change = {"kind": "env", "name": "NCCL_P2P_DISABLE", "value": "0"}
    control = {"what": "environment NCCL_P2P_DISABLE", "before": "1", "after": "0"}
    restart = {"what": "setting RestartUSec", "before": "5s", "after": "10s"}
    user = {"what": "setting User", "before": "serve", "after": "root"}
    proof = unit_oracle.one_control_proof([control, restart], change)
    assert proof["ok"] and proof["warnings"] == [restart] and proof["unexplained"] == []
    proof = unit_oracle.one_control_proof([control, restart, user], change)
    assert not proof["ok"] and proof["unexplained"] == [user] and proof["warnings"] == [restart]
    assert unit_oracle.decides_the_engine({"what": "setting LimitMEMLOCK"})
    assert unit_oracle.decides_the_engine({"what": "ExecStartPre[0] argv"})
    assert not unit_oracle.decides_the_engine({"what": "setting TimeoutStopUSec"})


def test_a_flag_changed_in_place_is_seen_by_its_value_word_alone():
    """The renderer keeps a changed flag where it stands: systemd's argv then differs in the value word only,
    which is the control's own (the word after the flag), never 'no change of the control at all'."""
    before = ["/usr/bin/python3", "-m", "sglang.launch_server", "--chunked-prefill-size", "4096", "--port", "30000"]
    after = before[:4] + ["8192"] + before[5:]
    diff = {"what": "ExecStart[0] argv", "before": before, "after": after,
            "edits": unit_oracle.word_edits(before, after), "argv": {"before": before, "after": after}}
    proof = one_control_proof([diff], {"kind": "arg", "name": "--chunked-prefill-size", "value": "8192"})
    assert proof["ok"] and proof["seen"], proof
    # the port's value changing is not the control's
    moved = before[:6] + ["30001"]
    other = {"what": "ExecStart[0] argv", "before": before, "after": moved,
             "edits": unit_oracle.word_edits(before, moved), "argv": {"before": before, "after": moved}}
    assert not one_control_proof([other], {"kind": "arg", "name": "--chunked-prefill-size", "value": "8192"})["ok"]
