"""Callback: a run that ends before its play does (Ctrl-C, SIGTERM) says, per host, the state it left
and the one command that recovers it, and records "interrupted" with the phase in the fleet summary
and the host's evidence folder. A host the controller loses (UNREACHABLE) mid-run is said the same way at
once - its watchdog's duty and the command that proves the host afterwards - and recorded "lost".

Ansible runs no rescue on an interrupt, so nothing on the host is restored by this run; the host's
own watchdog restores the original once the lease the run renewed runs out (rollout_lease_s), and
rollback.yml restores it at once. The phase comes from the rollout role's progress fact
(rollout_progress), the same one bin/serving-rollout shows.

The interrupt is this callback's to carry out, not Ansible's: ansible-core 2.19 turns SIGINT into a
KeyboardInterrupt in whatever the main thread runs, which can lose it (the play goes on) or hang the
run for good when a worker it stops held the result queue's lock (ansible/ansible#86078, #29124;
bench/bench_interrupt_race.py reproduces both against the lab). So SIGINT and SIGTERM here report, stop the
workers and exit 99 (Ansible's own code for an interrupt), and a second signal kills at once.
"""

import atexit
import json
import os
import signal
import sys
import time
from pathlib import Path

from ansible import context
from ansible.plugins.callback import CallbackBase

# At load, not in the signal handler: an import that fails there would skip the exit.
from serving_rollout.holder import children

DOCUMENTATION = """
name: interrupted
type: aggregate
short_description: Name the state an interrupted run left on each host and the command that recovers it
description:
  - On Ctrl-C or SIGTERM of ansible-playbook, prints per host the last phase the rollout recorded and the
    recovery command, and records the host as interrupted in the fleet summary and its evidence folder.
requirements: [enabled in ansible.cfg (callbacks_enabled)]
"""

# Phases after which the host is as the operator left it: nothing to recover.
SETTLED = ("restored",)
EXIT_INTERRUPTED = 99  # ansible-core's ExitCode.KEYBOARD_INTERRUPT


def say(text):
    """Straight to stderr: a signal handler must not wait on a lock the code it interrupted holds."""
    os.write(2, (text + "\n").encode())


def recovery_text(host, phase, run_id, inventory, lease_s):
    return (f"INTERRUPTED: {host} was at phase '{phase}' of run {run_id}; this run restored nothing. "
            f"The host's watchdog restores the original once its lease runs out ({lease_s}). "
            f"To restore and prove it now: ansible-playbook -i {inventory} playbooks/rollback.yml --limit {host}")


def lost_text(host, phase, run_id, inventory, lease_s, last_seen):
    if not phase:
        return (f"LOST: {host} is unreachable; this run recorded no phase there, so it never began to stop the "
                "original")
    return (f"LOST: {host} is unreachable at phase '{phase}' of run {run_id}. Its watchdog holds the duty: it "
            f"restores the original itself once the lease lapses: at most the chunk under way (its requests' "
            f"timeouts) plus {lease_s} after {last_seen} UTC, this host's last answer. Afterwards, to prove it: "
            f"ansible-playbook -i {inventory} playbooks/rollback.yml --limit {host}")


def record_interrupted(evidence, run_id, host, phase, lost=False):
    """The host's fleet record (when the run is a fleet run) and an interrupted.json in its evidence folder."""
    from serving_rollout import fleet

    note = {"schema": "serving-rollout.interrupted/v1", "run_id": run_id, "host": host, "phase": phase,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "lost": lost}
    folder = Path(evidence) / host / f"rollout-{run_id}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "interrupted.json").write_text(json.dumps(note, indent=2) + "\n")
    if (Path(evidence) / f"fleet-{run_id}" / "hosts.json").exists():
        with fleet.locked(evidence):
            fleet.record(evidence, run_id, host, {
                "lost" if lost else "interrupted": True,
                "failure": f"{'unreachable' if lost else 'interrupted'} at phase {phase}",
                "evidence": str(folder.relative_to(evidence))})


def stop_workers(pid):
    """SIGTERM to each of `pid`'s children (Ansible's workers, each in a session of its own): a worker
    stops its own connections, then exits."""
    try:
        workers = children(pid)
    except OSError:  # no /proc here: the run's exit still happens
        return
    for worker in workers:
        try:
            os.kill(worker, signal.SIGTERM)
        except OSError:  # gone meanwhile
            pass


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "interrupted"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.phases, self.finished, self.reported, self.extra, self.evidence = {}, False, False, {}, None
        self.hosts = {}  # every host a task ran on: when it last answered (UTC)
        self.main_pid = os.getpid()
        atexit.register(self.report)
        # Loaded after the task queue manager set its handlers: these replace them (see the module's doc).
        # The variable only lets bench/bench_interrupt_race.py measure Ansible's own path beside this one.
        if os.environ.get("SERVING_ROLLOUT_ANSIBLE_OWN_INTERRUPT") != "1":
            signal.signal(signal.SIGINT, self.on_interrupt)
            signal.signal(signal.SIGTERM, self.on_interrupt)

    def on_interrupt(self, signum, frame):
        if os.getpid() != self.main_pid:  # a worker forked before it set its own handler
            os._exit(128 + signum)
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second interrupt does not wait for the report
            signal.signal(sig, signal.SIG_DFL)
        try:
            say(f"ERROR: interrupted by {signal.Signals(signum).name}; stopping the run")
            self.report()
        finally:
            stop_workers(self.main_pid)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, RuntimeError, ValueError):  # a flush the handler interrupted
                    pass
            os._exit(EXIT_INTERRUPTED)

    def v2_playbook_on_start(self, playbook):
        self.evidence = str(Path(playbook._basedir) / ".." / "evidence")

    def v2_playbook_on_play_start(self, play):
        self.extra = dict(play.get_variable_manager().extra_vars or {})

    def v2_runner_on_ok(self, result):
        self.hosts[result._host.get_name()] = time.strftime("%H:%M:%S", time.gmtime())
        progress = (result._result.get("ansible_facts") or {}).get("rollout_progress")
        if isinstance(progress, dict) and progress.get("kind") == "phase":
            self.phases[result._host.get_name()] = progress

    def v2_runner_on_unreachable(self, result):
        host = result._host.get_name()
        progress = self.phases.get(host) or {}
        phase = progress.get("phase") if progress.get("phase") not in SETTLED else None
        say(lost_text(host, phase, progress.get("run_id"), self.inventory(), self.lease(),
                      self.hosts.get(host, "?")))
        if phase:
            try:
                record_interrupted(self.extra.get("rollout_evidence_dir") or self.evidence, progress.get("run_id"),
                                   host, phase, lost=True)
            except (OSError, ValueError) as exc:
                say(f"LOST: {host}: could not record it: {exc}")

    def inventory(self):
        return ",".join(context.CLIARGS.get("inventory") or ["INVENTORY"])

    def lease(self):
        return f"{self.extra['rollout_lease_s']} s" if "rollout_lease_s" in self.extra else "rollout_lease_s"

    def v2_playbook_on_stats(self, stats):
        self.finished = True

    def report(self):
        if self.finished or self.reported or os.getpid() != self.main_pid:
            return
        self.reported = True
        inventory, lease = self.inventory(), self.lease()
        evidence = self.extra.get("rollout_evidence_dir") or self.evidence
        for host in sorted(set(self.hosts) - set(self.phases)):
            say(f"INTERRUPTED: {host}: this run recorded no phase there, so it never began to stop the original; "
                "a lock or rendered candidate it left is taken over by the next run (its holder is gone)")
        for host, progress in sorted(self.phases.items()):
            if progress.get("phase") in SETTLED:
                continue
            say(recovery_text(host, progress.get("phase"), progress.get("run_id"), inventory, lease))
            try:
                record_interrupted(evidence, progress.get("run_id"), host, progress.get("phase"))
            except (OSError, ValueError) as exc:
                say(f"INTERRUPTED: {host}: could not record it in {evidence}: {exc}")
