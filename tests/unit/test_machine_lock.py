"""The machine lock of bin/test's two workers (tests/conftest.py): a machine_alone test waits for
the other worker's test to end and holds the machine alone; a test that starts while it waits
takes no shared lock until it is done; a "wanted" file left by a killed run blocks nobody.
(Its own lock file: this test itself runs under the suite's shared lock.)"""

import subprocess
import sys
import textwrap
import time

import conftest

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    import conftest
    with conftest.machine_lock({alone}, Path({path!r})):
        print("in", time.monotonic(), flush=True)
        time.sleep({seconds})
        print("last", time.monotonic(), flush=True)
""")


def holder(path, alone, seconds):
    code = HOLD.format(tests=str(conftest.REPO / "tests"), alone=alone, seconds=seconds, path=str(path))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=conftest.REPO)


def times(proc):
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return {word: float(value) for word, value in (line.split() for line in out.splitlines())}


def test_an_alone_test_waits_for_the_shared_holder_and_a_later_shared_one_waits_for_it(tmp_path):
    lock = tmp_path / "machine.lock"
    shared = holder(lock, False, 1.0)
    assert shared.stdout.readline().startswith("in ")
    alone = holder(lock, True, 1.0)
    while not conftest.wanted_by_a_live_process(lock.with_suffix(".wanted")):  # it announced itself
        time.sleep(0.05)
    later = holder(lock, False, 0.0)
    first, second, third = times(shared), times(alone), times(later)
    # Ordered by the lock, not by a timing margin: every time is read while holding it.
    assert first["last"] <= second["in"] < second["last"] <= third["in"], (first, second, third)


def test_a_wanted_file_left_by_a_dead_process_blocks_nobody(tmp_path):
    lock = tmp_path / "machine.lock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.with_suffix(".wanted").write_text(dead.stdout.strip())
    assert not conftest.wanted_by_a_live_process(lock.with_suffix(".wanted"))
    assert set(times(holder(lock, False, 0.0))) == {"in", "last"}
