"""The host-side watchdog of a run: the script a transient unit runs while the candidate serves.

While the controller renews its lease (the lease file: its content the seconds it holds, its mtime the
renewal) the script waits. When the lock is no longer this run's (the run ended, or rollback.yml took it
over) it exits. When the lease runs out, the controller is gone: it restores the original itself - stop
the candidate, start the original, remove the candidate unit, record the phase, release the lock - so a
candidate never serves on after its controller vanished. Pure functions; library/rollout_watchdog.py
writes and starts it."""

import json
import shlex


def lease_path(lock_path):
    """The lease file beside a lock (rollout_lock renews it, the watchdog reads it)."""
    return f"{lock_path}.lease"


def script(unit, candidate_unit, state_dir, run_id, token, lock_path):
    """The watchdog's /bin/sh script for one run (every value quoted for the shell)."""
    q = shlex.quote
    folder = f"{state_dir}/{unit}"
    state = json.dumps({"unit": unit, "candidate": candidate_unit, "phase": "restored"}, indent=4, sort_keys=True)
    return f"""#!/bin/sh
# serving-rollout host watchdog for {unit}, run {run_id} (a transient unit, started by the controller
# before the original stopped); module_utils/watchdog.py says what it does.
set -u
lock={q(lock_path)}
lease={q(lease_path(lock_path))}
while :; do
  grep -qF {q(f'"token": "{token}"')} "$lock" 2>/dev/null || exit 0
  held=$(cat "$lease" 2>/dev/null || echo 0)
  age=$(( $(date +%s) - $(stat -c %Y "$lease" 2>/dev/null || echo 0) ))
  [ "$age" -le "$held" ] || break
  sleep 2
done
echo "lease of run {run_id} not renewed for $age s (it held $held s): the controller is gone; restoring {unit}"
systemctl stop {q(candidate_unit)}
systemctl start {q(unit)}
rm -f {q(f'/etc/systemd/system/{candidate_unit}')}
systemctl daemon-reload
cat > {q(f'{folder}/state.json')} <<'STATE'
{state}
STATE
cat > {q(f'{folder}/watchdog-{run_id}.json')} <<RECORD
{{"run_id": "{run_id}", "restored_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "lease_age_s": $age, "lease_s": $held,
 "original": "$(systemctl is-active {q(unit)})"}}
RECORD
rm -f "$lock" "$lease"
echo "restored: {unit} $(systemctl is-active {q(unit)}); run rollback.yml to prove it"
"""
