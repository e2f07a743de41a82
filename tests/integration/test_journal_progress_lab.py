"""Real journald on the lab host (systemd 252): a unit prints tqdm-style progress bars - carriage returns and
ANSI colours in one message, as tqdm writes to a pipe - and then a crash line that shares the last bar's
message. journalctl's short formats print such a message as "[N blob data]" (and -o cat as one line of raw
control characters); the boot watchdog and journal_scan read the journal as it is stored (JSON, --all) and see
each redraw, the phase and the crash."""

import json
import tempfile
import time
from pathlib import Path

import pytest
from conftest import lab, run_playbook

UNIT = "progress-bars.service"
# What tqdm writes to a pipe: each redraw starts with a carriage return; the colours are the engine's own.
SCRIPT = r"""#!/bin/sh
printf 'Loading safetensors checkpoint shards:   0%% Completed | 0/2'
printf '\rLoading safetensors checkpoint shards: 100%% Completed | 2/2\n'
printf '\033[32mINFO\033[0m 12-05 10:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 4,096 tokens\n'
printf '\rCapturing CUDA graphs (decode, FULL):  40%%|####      | 2/5'
printf '\rCapturing CUDA graphs (decode, FULL):  80%%|########  | 4/5'
printf '\r[rank0]: RuntimeError: CUDA error: out of memory\n'
# the process lives until journald has stored the crash line (the fixture releases it): journald reads a line's
# invocation from the process's cgroup, so a line it gets to after the process is gone may carry none
while [ ! -e /run/progress-bars.release ]; do sleep 0.1; done
exit 1
"""
UNIT_TEXT = """[Unit]
Description=lab: a start that prints progress bars and crashes during graph capture
[Service]
Type=exec
ExecStart=/bin/sh /usr/local/bin/progress-bars.sh
"""


@pytest.fixture(scope="module")
def progress():
    lab("sh", "-c", "cat > /usr/local/bin/progress-bars.sh", stdin=SCRIPT)
    lab("sh", "-c", f"cat > /etc/systemd/system/{UNIT}", stdin=UNIT_TEXT)
    # the script may exit before systemctl's start job returns (a failed start): the journal is the test's
    lab("sh", "-c", f"rm -f /run/progress-bars.release; systemctl daemon-reload; systemctl reset-failed {UNIT}; "
                    f"systemctl start {UNIT}", check=False)
    # the premise: journald has the crash line (it reads the unit's pipe on its own time; a condition, not a sleep)
    deadline = time.monotonic() + 60
    while "CUDA error" not in lab("journalctl", "-o", "cat", "--no-pager", "-u", UNIT).stdout \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    # then the process exits (status 1) and the unit fails, before anything reads it
    lab("sh", "-c", f"touch /run/progress-bars.release; "
                    f"for _ in $(seq 600); do systemctl is-active --quiet {UNIT} || break; sleep 0.1; done")
    results = Path(tempfile.mkdtemp(prefix="journal-progress-")) / "results.json"
    try:
        run = run_playbook("../tests/integration/playbooks/journal_progress.yml", {"results_file": str(results)},
                           inventory="inventory/lab", local=False)
        assert run.returncode == 0, run.stdout[-3000:]
        plain = lab("journalctl", "--no-pager", "-o", "short-unix", "-u", UNIT).stdout
        yield json.loads(results.read_text()), plain
    finally:
        lab("sh", "-c", f"systemctl stop {UNIT}; systemctl reset-failed {UNIT}; "
                        f"rm -f /etc/systemd/system/{UNIT} /usr/local/bin/progress-bars.sh /run/progress-bars.release; "
                        "systemctl daemon-reload")


def test_journalctls_short_format_hides_the_progress_bars_and_the_crash_that_shares_them(progress):
    _, plain = progress
    assert "blob data]" in plain and "CUDA error" not in plain, plain  # the old reading's blind spot


def test_the_boot_watchdog_names_the_phase_and_the_cause_from_the_stored_journal(progress):
    watch = progress[0]["watch"]  # registered with failed_when: false, so the test reads its error
    assert watch["stage"] == "crash", watch
    assert "(phase cuda-graph-capture)" in watch["msg"], watch["msg"]
    assert "RuntimeError: CUDA error: out of memory" in watch["msg"], watch["msg"]
    assert watch["phase"] == "cuda-graph-capture", watch


def test_journal_scan_reads_every_redraw_the_phase_and_the_crash(progress):
    scan = progress[0]["scan"]
    assert (scan["crash"], scan["crash_phase"]) == ("cuda-oom", "cuda-graph-capture"), scan
    assert scan["cause"] == "RuntimeError: CUDA error: out of memory", scan["cause"]
    assert scan["kv_cache_tokens"] == 4096, scan  # the coloured line, read without its colours
    assert "Loading safetensors checkpoint shards: 100% Completed | 2/2" in scan["excerpt"], scan["excerpt"]
    assert not any("\x1b" in line or "\r" in line or "blob data" in line for line in scan["excerpt"]), scan["excerpt"]
