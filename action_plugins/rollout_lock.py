"""Action plugin: the controller's side of rollout_lock (the module does the work on the host).

Taking the lock (state=present), it names this controller's ansible-playbook process (host, pid, start
time) as the lock's holder, so that a refused run, and rollback.yml taking a lock over, can tell whether
that holder still runs. Both look at /proc on the controller, here, never on the host:
- a refusal's message ends with the holder's liveness;
- a lock taken over returns `previous_liveness` beside `previous`.
Other states pass through unchanged. Documentation: library/rollout_lock.py."""

import os

from ansible.plugins.action import ActionBase

from serving_rollout import holder


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("state", "present") != "present":
            return self._execute_module(module_name="rollout_lock", module_args=args, task_vars=task_vars)
        me = holder.me()
        args.setdefault("controller", me)
        args.setdefault("holder", f"{os.environ.get('USER') or 'unknown'}@{me['host']} pid {me['pid']} "
                                  f"{task_vars.get('ansible_play_name', '')}".strip())
        result = self._execute_module(module_name="rollout_lock", module_args=args, task_vars=task_vars)
        if result.get("failed") and result.get("lock"):
            result["msg"] = f"{result.get('msg', '')}. Holder: {holder.liveness(result['lock'])}"
        if result.get("previous"):
            result["previous_liveness"] = holder.liveness(result["previous"])
        return result
