"""Action plugin: the controller's side of rollout_lock (the module does the work on the host).

Taking the lock (state=present), it names this controller's ansible-playbook process (host, pid, start
time) as the lock's holder, so that a refused run, and rollback.yml taking a lock over, can tell whether
that holder still runs. Both look at /proc on the controller, here, never on the host:
- a refusal's message ends with the holder's liveness; a holder found dead is asked about again with
  holder_dead, so a run interrupted before it began to stop the original does not block the next one;
- a lock taken over returns `previous_liveness` beside `previous`;
- a take-over (steal) of a lock whose holder is alive on this controller is refused, naming it, before the lock
  is touched: a living run, or another rollback, keeps its duty (it restores when it fails or is interrupted).
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
        if args.get("steal"):
            refusal = self.living_holder(args, task_vars)
            if refusal:
                return refusal
        result = self._execute_module(module_name="rollout_lock", module_args=args, task_vars=task_vars)
        if result.get("failed") and result.get("lock") and holder.alive(result["lock"]) is False:
            # a dead holder that never began to stop the original left only its render: the module takes it over
            result = self._execute_module(module_name="rollout_lock", module_args={**args, "holder_dead": True},
                                          task_vars=task_vars)
        if result.get("failed") and result.get("lock"):
            result["msg"] = f"{result.get('msg', '')}. Holder: {holder.liveness(result['lock'])}"
        if result.get("previous"):
            result["previous_liveness"] = holder.liveness(result["previous"])
        return result

    def living_holder(self, args, task_vars):
        """A refusal when another holder of the lock still runs here, else None."""
        read = self._execute_module(module_name="rollout_lock", task_vars=task_vars,
                                    module_args={"path": args["path"], "token": args["token"], "state": "held",
                                                 "state_file": args.get("state_file")})
        lock = read.get("lock") or {}
        if read.get("held") or not holder.alive(lock):
            return None
        return {"failed": True, "lock": lock, "changed": False,
                "msg": f"the lock {args['path']} is held by run {lock.get('run_id')} ({lock.get('holder')}), which "
                       f"is still running: {holder.liveness(lock)}. It keeps the duty for the host and restores "
                       "the original itself when it fails or is interrupted; nothing was taken over or changed"}
