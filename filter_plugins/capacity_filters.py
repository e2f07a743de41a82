"""Filter: an arm's KV capacity as its engine reported it at start (serving_rollout/play/capacity.py)."""

from ansible.errors import AnsibleFilterError

from serving_rollout.play.capacity import arm_capacity as _arm_capacity


def arm_capacity(scan):
    """{kv_cache_tokens, max_concurrency} of a journal_scan result's scan ({} when the arm never started)."""
    if not isinstance(scan, dict):
        raise AnsibleFilterError(f"arm_capacity needs a journal scan (a dict), "
                                 f"got {type(scan).__name__}: {scan!r:.200}")
    return _arm_capacity(scan)


class FilterModule:
    def filters(self):
        return {"arm_capacity": arm_capacity}
