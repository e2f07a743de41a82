"""Action plugin: the controller's side of rollout_lock (the module does the work on the host).

Taking the lock (state=present), it names this controller's ansible-playbook process (host, pid, start
time) as the lock's holder, so that a refused run, and rollback.yml taking a lock over, can tell whether
that holder still runs. Both look at /proc on the controller, here, never on the host:
- a refusal's message ends with the holder's liveness; a holder found dead is asked about again with
  holder_dead, so a run interrupted before it began to stop the original does not block the next one;
- a lock taken over returns `previous_liveness` beside `previous`;
- a take-over (steal) of a lock that another rollback holds (`restoring`) and whose process is alive on this
  controller is refused, naming it, before the lock is touched: two rollbacks never act at once, and the living
  one keeps its duty. A live run's lock is still taken over (a rollback stops its measuring at once).
A stale lock taken over is said on the console (whose run, why). Other states pass through unchanged.
Documentation: library/rollout_lock.py."""

import os

from ansible.utils.display import Display

from serving_rollout import holder
from serving_rollout.play.actions import PlayAction

display = Display()


class ActionModule(PlayAction):
    def step(self, params, task_vars):
        args = {key: value for key, value in params.items() if value is not None}  # the module defaults the rest
        if args["state"] != "present":
            return self._execute_module(module_name="rollout_lock", module_args=args, task_vars=task_vars)
        me = holder.me()
        args["controller"] = args.get("controller") or me
        args["holder"] = args.get("holder") or f"{os.environ.get('USER') or 'unknown'}@{me['host']} pid {me['pid']} " \
                                               f"{task_vars.get('ansible_play_name', '')}".strip()
        if args.get("steal"):
            seen = self.read(args, task_vars)
            refusal = self.living_rollback(args, seen)
            if refusal:
                return refusal
            if seen.get("token") and not seen.get("held"):
                args["expect_token"] = seen["token"]  # taken over only if no one took it meanwhile
        result = self._execute_module(module_name="rollout_lock", module_args=args, task_vars=task_vars)
        if result.get("failed") and result.get("lock") and holder.alive(result["lock"]) is False:
            # a dead holder that never began to stop the original left only its render: the module takes it over
            result = self._execute_module(module_name="rollout_lock", task_vars=task_vars, module_args={
                **args, "holder_dead": True, "expect_token": result["lock"].get("token")})
        if result.get("failed") and result.get("lock"):
            result["msg"] = f"{result.get('msg', '')}. Holder: {holder.liveness(result['lock'])}"
        if result.get("previous"):
            result["previous_liveness"] = holder.liveness(result["previous"])
        if result.get("stale") and not result.get("failed"):  # the caller removes what that run left
            stale = result["stale"]
            display.display(f"took over the stale lock of run {stale.get('run_id', '?')} "
                            f"(by {stale.get('holder', '?')}, since {stale.get('since', '?')}): "
                            f"{result.get('stale_reason')}; removing its candidate unit")
        return result

    def read(self, args, task_vars):
        """The lock as it is now ({} when none), with held: whether this token holds it."""
        read = self._execute_module(module_name="rollout_lock", task_vars=task_vars,
                                    module_args={"path": args["path"], "token": args["token"], "state": "held",
                                                 "state_file": args.get("state_file")})
        return {**(read.get("lock") or {}), "held": bool(read.get("held"))}

    @staticmethod
    def living_rollback(args, lock):
        """A refusal when another rollback holds the lock and still runs here, else None."""
        if lock.get("held") or not lock.get("restoring") or not holder.alive(lock):
            return None
        lock = {k: v for k, v in lock.items() if k != "held"}
        return {"failed": True, "lock": lock, "changed": False,
                "msg": f"the lock {args['path']} is held by another rollback, run {lock.get('run_id')} "
                       f"({lock.get('holder')}), which is still running: {holder.liveness(lock)}. It keeps the duty "
                       "for the host (and hands it to the host's watchdog if it dies); nothing was taken over or "
                       "changed. Wait for it, then run rollback.yml again to prove the host"}
