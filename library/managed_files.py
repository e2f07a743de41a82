#!/usr/bin/python
"""Ansible module: install a managed unit's rendered files, or put back the files it replaced."""

DOCUMENTATION = r"""
---
module: managed_files
short_description: Install a rendered unit's files with a verified copy of what they replace
description:
  - With O(state=installed), compares each rendered file with the host's and changes nothing when all match
    (changed=false). Otherwise it first copies every file it will write or remove into O(keep) (mode 0600,
    each copy's sha256 checked against its source, absent files recorded as absent), then writes the
    rendered files (each in one step, a temporary file renamed over it, mode 0644) and removes O(remove).
  - A failure while writing (a full disk, a read-only folder) puts every file back from the verified copy
    and fails, naming the failure and what was put back.
  - With O(state=restored), puts the files of the copy in O(keep) back as they were (a file that was absent
    is removed), each checked against its sha256. The serving_unit role does this when the unit fails to
    restart from the installed files.
  - Supports check mode and diff mode; a diff shows unit text with values off the allow-list redacted.
options:
  files:
    description: The rendered files, path to text.
    type: dict
    default: {}
  remove:
    description: Files an earlier install wrote that the render no longer has; removed (after the copy).
    type: list
    elements: path
    default: []
  keep:
    description: Folder for the verified copy of the files the install replaces (replaced by each install that changes something).
    type: path
    required: true
  state:
    description: C(installed) to install the files, C(restored) to put back the copy in O(keep).
    type: str
    choices: [installed, restored]
    default: installed
author: serving-rollout
"""

EXAMPLES = r"""
- name: Install the rendered files
  managed_files:
    files: "{{ serving_unit_recipe | recipe_files }}"
    remove: [/etc/systemd/system/sglang.service.d/10-old.conf]
    keep: /var/lib/serving-rollout/managed/sglang.service/previous

- name: Put back the files the install replaced
  managed_files:
    keep: /var/lib/serving-rollout/managed/sglang.service/previous
    state: restored
"""

RETURN = r"""
written:
  description: Files written (or that would be, in check mode).
  type: list
  sample: [/etc/systemd/system/sglang.service]
  elements: str
  returned: always
removed:
  description: Files removed (or that would be).
  type: list
  sample: []
  elements: str
  returned: always
restored:
  description: Files put back from the verified copy (state=restored, or after a failed install).
  type: list
  sample: []
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_files import free_space
from ansible.module_utils.managed_files import InstallFailed, diffs, install, plan, restore


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "dict", "default": {}},
            "remove": {"type": "list", "elements": "path", "default": []},
            "keep": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["installed", "restored"], "default": "installed"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "restored":
        if module.check_mode:
            module.exit_json(changed=False, written=[], removed=[], restored=[])
        try:
            restored = restore(p["keep"])
        except (OSError, ValueError, KeyError) as exc:
            module.fail_json(msg=f"could not put back the files kept in {p['keep']}: {exc}", written=[], removed=[],
                             restored=[])
        module.exit_json(changed=bool(restored), written=[], removed=[], restored=restored)

    bad = [path for path, text in p["files"].items() if not str(path).startswith("/") or not isinstance(text, str)]
    if bad:
        module.fail_json(msg=f"files must map absolute paths to text; bad: {', '.join(map(str, bad))}")
    changes = plan(p["files"], p["remove"])
    result = {"changed": bool(changes["write"] or changes["remove"]), "written": changes["write"],
              "removed": changes["remove"], "restored": []}
    if module._diff and result["changed"]:
        result["diff"] = diffs(changes, p["files"])
    if module.check_mode or not result["changed"]:
        module.exit_json(**result)
    try:
        install(p["files"], changes, p["keep"])
    except InstallFailed as exc:
        module.fail_json(msg=f"{exc} ({free_space(p['keep'])})", written=[], removed=[], restored=exc.restored)
    except OSError as exc:  # the verified copy could not be made: nothing was written
        module.fail_json(msg=f"no file was changed: the copy of the files to replace could not be kept in "
                             f"{p['keep']}: {exc} ({free_space(p['keep'])})", written=[], removed=[], restored=[])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
