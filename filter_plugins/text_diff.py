"""Filter: a unified diff of two texts (for --check --diff style reports)."""

import difflib

from ansible.errors import AnsibleFilterError


def unified_diff(before, after, before_name="original", after_name="candidate"):
    if not isinstance(before, str) or not isinstance(after, str):
        raise AnsibleFilterError(f"unified_diff needs two strings, got {type(before).__name__} "
                                 f"and {type(after).__name__}")
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        fromfile=before_name, tofile=after_name))


class FilterModule:
    def filters(self):
        return {"unified_diff": unified_diff}
