"""Callback: a run that ends before its play does (Ctrl-C, SIGTERM) says, per host, the state it left
and the one command that recovers it, and records "interrupted" with the phase in the fleet summary
and the host's evidence folder.

Ansible runs no rescue on an interrupt, so nothing on the host is restored by this run; the host's
own watchdog restores the original once the lease the run renewed runs out (rollout_lease_s), and
rollback.yml restores it at once. The phase comes from the rollout role's progress fact
(rollout_progress), the same one bin/serving-rollout shows.
"""

import atexit
import json
import os
import signal
import time
from pathlib import Path

from ansible import context
from ansible.plugins.callback import CallbackBase

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


def recovery_text(host, phase, run_id, inventory, lease_s):
    return (f"INTERRUPTED: {host} was at phase '{phase}' of run {run_id}; this run restored nothing. "
            f"The host's watchdog restores the original once its lease runs out ({lease_s}). "
            f"To restore and prove it now: ansible-playbook -i {inventory} playbooks/rollback.yml --limit {host}")


def record_interrupted(evidence, run_id, host, phase):
    """The host's fleet record (when the run is a fleet run) and an interrupted.json in its evidence folder."""
    from serving_rollout import fleet

    note = {"schema": "serving-rollout.interrupted/v1", "run_id": run_id, "host": host, "phase": phase,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    folder = Path(evidence) / host / f"rollout-{run_id}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "interrupted.json").write_text(json.dumps(note, indent=2) + "\n")
    if (Path(evidence) / f"fleet-{run_id}" / "hosts.json").exists():
        with fleet.locked(evidence):
            fleet.record(evidence, run_id, host, {"interrupted": True, "failure": f"interrupted at phase {phase}",
                                                  "evidence": str(folder.relative_to(evidence))})


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "interrupted"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.phases, self.finished, self.extra, self.evidence = {}, False, {}, None
        self.main_pid = os.getpid()
        atexit.register(self.report)
        # SIGTERM ends the run the way Ctrl-C does (Ansible's own interrupt path, then this report).
        signal.signal(signal.SIGTERM, self.on_term)

    def on_term(self, signum, frame):
        if os.getpid() == self.main_pid:
            raise KeyboardInterrupt
        os._exit(128 + signum)

    def v2_playbook_on_start(self, playbook):
        self.evidence = str(Path(playbook._basedir) / ".." / "evidence")

    def v2_playbook_on_play_start(self, play):
        self.extra = dict(play.get_variable_manager().extra_vars or {})

    def v2_runner_on_ok(self, result):
        progress = (result._result.get("ansible_facts") or {}).get("rollout_progress")
        if isinstance(progress, dict) and progress.get("kind") == "phase":
            self.phases[result._host.get_name()] = progress

    def v2_playbook_on_stats(self, stats):
        self.finished = True

    def report(self):
        if self.finished or os.getpid() != self.main_pid:
            return
        inventory = ",".join(context.CLIARGS.get("inventory") or ["INVENTORY"])
        evidence = self.extra.get("rollout_evidence_dir") or self.evidence
        lease = f"{self.extra['rollout_lease_s']} s" if "rollout_lease_s" in self.extra else "rollout_lease_s"
        for host, progress in sorted(self.phases.items()):
            if progress.get("phase") in SETTLED:
                continue
            self._display.display(recovery_text(host, progress.get("phase"), progress.get("run_id"), inventory,
                                                lease), stderr=True)
            try:
                record_interrupted(evidence, progress.get("run_id"), host, progress.get("phase"))
            except (OSError, ValueError) as exc:
                self._display.display(f"INTERRUPTED: {host}: could not record it in {evidence}: {exc}", stderr=True)
