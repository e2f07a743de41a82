#!/usr/bin/python
"""Ansible module: wait, on the host, until a serving engine answers its health endpoint."""

DOCUMENTATION = r"""
---
module: engine_ready
short_description: Wait for a serving engine's health endpoint, within a deadline
description:
  - Polls C(base_url)/C(path) on the host until it answers HTTP 200 or C(timeout_s) passes,
    in one module call, so a wait that succeeds prints no failed retries.
  - The health route is the engine adapter's (SGLang C(/health_generate), which runs a generation;
    vLLM C(/health)) unless C(path) is given.
  - With C(unit), stops early when the systemd unit enters C(failed) or stops, or exited and waits for systemd
    to start it again (auto-restart, a unit with Restart=), or when the
    invocation's journal shows a crash signature of the engine's adapter while the process lives
    (a worker died, a watchdog time-out), naming the phase the start reached and the cause line.
  - Read-only; supports check mode (nothing is waited for).
options:
  base_url:
    description: Engine URL, e.g. http://127.0.0.1:30000.
    type: str
    required: true
  engine:
    description: The engine (its adapter gives the health route, the phases and the crash signatures).
    type: str
    default: unknown
    choices: [sglang, vllm, unknown]
  path:
    description: Health path; empty means the engine adapter's.
    type: str
    default: ""
  timeout_s:
    description: Deadline in seconds.
    type: float
    required: true
  unit:
    description: >-
      The systemd unit running the engine, watched while waiting; once the health route answers, the listener on
      the port must not be foreign to this unit's control group (module_utils/port_owner.py), or the wait fails
      naming the process that holds the port.
    type: str
  stall_s:
    description: >-
      With C(unit), the boot watchdog - the engine's journal (this invocation) is its progress: a new line keeps
      the wait alive (not the heartbeat a stuck engine repeats), none for this many seconds with the process
      alive is a hang, named with its phase (0 - off; the time-out only).
    type: float
    default: 0
  env_files:
    description: The unit's EnvironmentFiles, whose secret values are redacted from the log line shown.
    type: list
    elements: path
    default: []
author: serving-rollout
"""

EXAMPLES = r"""
- name: Wait for the candidate
  engine_ready:
    base_url: http://127.0.0.1:30000
    timeout_s: 1200
    unit: sglang-candidate.service
    engine: sglang
"""

RETURN = r"""
elapsed_s:
  description: Seconds waited.
  type: float
  returned: always
  sample: 41.5
polls:
  description: Health requests made.
  type: int
  returned: always
  sample: 83
status:
  description: The last HTTP status (200 when ready).
  type: int
  returned: always
  sample: 200
path:
  description: The health route polled.
  type: str
  returned: always
  sample: /health_generate
phase:
  description: The last start-up phase the journal showed (with C(unit) and C(stall_s)), or null.
  type: str
  returned: always
  sample: cuda-graph-capture
owner:
  description: With C(unit), who serves on the port after the wait (module_utils/port_owner.py); a foreign listener fails the wait.
  type: dict
  returned: with unit
  sample: {serving: true, judged: true, port: 30000, owners: [{pid: 412, program: python3}], foreign: []}
stage:
  description: ready, or how the start failed - crash (the unit exited), hang (no progress for stall_s), slow (still
    logging at the time-out), timeout (no log to judge by).
  type: str
  returned: always
  sample: ready
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_adapters import health_path
from ansible.module_utils.engine_client import wait_healthy
from ansible.module_utils.env_files import secret_values
from ansible.module_utils.host_commands import runner
from ansible.module_utils.port_owner import port_of, who_serves
from ansible.module_utils.start_watch import StartWatch


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "engine": {"type": "str", "default": "unknown", "choices": ["sglang", "vllm", "unknown"]},
            "path": {"type": "str", "default": ""},
            "timeout_s": {"type": "float", "required": True},
            "unit": {"type": "str"},
            "stall_s": {"type": "float", "default": 0},
            "env_files": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout_s"] <= 0:
        module.fail_json(msg=f"timeout_s must be positive, got {p['timeout_s']}")
    path = p["path"] or health_path(p["engine"])
    if module.check_mode:
        module.exit_json(changed=False, elapsed_s=0.0, polls=0, status=None, path=path)
    watch = StartWatch(runner(module), p["engine"], p["unit"], secret_values(p["env_files"]))
    watching = p["unit"] and p["stall_s"] > 0
    result = wait_healthy(p["base_url"], path, p["timeout_s"], unit_failed=watch.unit_failed,
                          progress=watch.progress if watching else None, stall_s=p["stall_s"])
    result.update(path=path, phase=watch.phase)
    if p["unit"]:  # a 200 proves only that something answers: whose is it? (and a failed start: who holds the port)
        result["owner"] = who_serves(runner(module), p["unit"], port_of(p["base_url"]))
        if result["owner"]["foreign"]:
            said = f"{path} answered, but not from {p['unit']}" if result["ok"] else result["error"]
            result.update(ok=False, error=f"{said}: {result['owner']['reason']}")
    if not result["ok"]:
        module.fail_json(msg=result["error"], **{k: v for k, v in result.items() if k != "ok"})
    module.exit_json(changed=False, **{k: v for k, v in result.items() if k != "ok"})


if __name__ == "__main__":
    main()
