"""Filters: why a run must stop measuring (module_utils/arm.py, which the latency_arm action also
runs before each chunk): its lock taken over, or the candidate engine no longer the one that became
ready; and the endurance cell's verdict."""

from ansible.errors import AnsibleFilterError

from serving_rollout.module_utils import arm


def lock_lost(lock_result):
    """The reason from a rollout_lock (state held) result, or None while the lock is this run's."""
    if not isinstance(lock_result, dict):
        raise AnsibleFilterError(f"lock_lost needs a rollout_lock result, got {lock_result!r:.200}")
    return arm.lock_lost(lock_result)


def engine_changed(status, identity, when="cells"):
    """The reason from systemd's status now against the identity at ready, or None when it is the same engine."""
    if not isinstance(status, dict) or not isinstance(identity, dict):
        raise AnsibleFilterError(f"engine_changed needs systemd's status and the identity at ready, "
                                 f"got {status!r:.100} and {identity!r:.100}")
    return arm.engine_changed(identity, status, when)


def endurance_judgement(cell, duration_s, drift_limit, hang_s):
    """The endurance cell's verdict {ok, reason, ...} from the latency_arm action's merged cell."""
    try:
        return arm.endurance_judgement(cell, float(duration_s), float(drift_limit), float(hang_s))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"endurance_judgement: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"lock_lost": lock_lost, "engine_changed": engine_changed, "endurance_judgement": endurance_judgement}
