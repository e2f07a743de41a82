"""Filter: the cause of a failed task in one line, for the rescue's loud failure."""

from ansible.errors import AnsibleFilterError


def failure_cause(result, task_name="unknown task"):
    """A failed task's message; for a failed loop, the messages of its failed items
    (a loop's own message is only "One or more items failed")."""
    if not isinstance(result, dict):
        raise AnsibleFilterError(f"failure_cause needs a task result (a dict), got {type(result).__name__}: {result!r}")
    items = [item for item in result.get("results") or [] if isinstance(item, dict) and item.get("failed")]
    messages = [str(item.get("msg", item)) for item in items] or [str(result.get("msg", result))]
    return f"{task_name}: {'; '.join(messages)}"


class FilterModule:
    def filters(self):
        return {"failure_cause": failure_cause}
