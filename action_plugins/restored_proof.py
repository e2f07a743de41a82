"""Action plugin: the proof that the original is back - the same unit, file for file, serving cleanly and
answering. Each check runs on the host as its own module, in order, and the first that fails ends the
proof with its message; what was read until then is returned all the same (the evidence records it).

1. systemd: active, enabled, NRestarts 0, the same FragmentPath, its files loaded (NeedDaemonReload=no: what runs
   is what the files say), a new invocation when this run stopped it;
2. who serves: the listener on the engine's port is in the unit's own control group, never a foreign process
   that answers the health route in its place (port_owner);
3. every file of the snapshot byte for byte (sha256);
4. a container's name and image, as its runtime reports them;
5. the restored invocation's journal: no crash, no error new against the original's own start;
6. the smoke and JSON gates (those qualified on this host).
Documentation: library/restored_proof.py."""

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

from serving_rollout.module_utils.container_truth import identity_problems, inspect_identity_argv
from serving_rollout.module_utils.engine_adapters import log_failure
from serving_rollout.play.actions import PlayAction

display = Display()

# The systemd properties the proof checks.
CHECKED = ("ActiveState", "UnitFileState", "NRestarts", "FragmentPath", "InvocationID", "NeedDaemonReload")


class ActionModule(PlayAction):
    def step(self, params, task_vars):
        self.args, self.task_vars = params, task_vars
        proof = {"changed": False, "proven": False, "state": {}, "owner": None, "files": [], "container": None,
                 "scan": None, "gates": []}
        try:
            self.prove(proof)
        except AnsibleActionFail as exc:
            return dict(proof, failed=True, msg=exc.message)
        proof["proven"] = True
        display.display(f"{task_vars.get('inventory_hostname')}: {self.args['unit']} restored and proven: "
                        f"active from the same file, {len(proof['files'])} files byte for byte, "
                        f"{'container ' + self.args['container'] + ', ' if proof['container'] else ''}"
                        f"a clean journal, {', '.join(r['gate'] for r in proof['gates']) or 'no'} gates passed")
        return proof

    def module(self, module_name, /, **module_args):
        result = self._execute_module(module_name=module_name, module_args=module_args, task_vars=self.task_vars)
        if result.get("failed"):
            raise AnsibleActionFail(f"{module_name}: {result.get('msg', result)}")
        return result

    def prove(self, proof):
        a = self.args
        unit = a["unit"]
        status = self.module("ansible.builtin.systemd_service", name=unit).get("status") or {}
        # Only the properties the proof reads and the evidence records: the rest (Environment=) can hold secrets.
        state = {key: status[key] for key in (*CHECKED, *(a.get("keys") or [])) if key in status}
        proof["state"] = state
        before = a.get("invocation_before") or ""
        if not (state.get("ActiveState") == "active" and state.get("UnitFileState") == "enabled"
                and state.get("NRestarts") == "0" and state.get("FragmentPath") == a["fragment_path"]
                and (not before or state.get("InvocationID") != before)):
            raise AnsibleActionFail(
                f"restoration not proven: ActiveState={state.get('ActiveState')} "
                f"UnitFileState={state.get('UnitFileState')} NRestarts={state.get('NRestarts')} "
                f"FragmentPath={state.get('FragmentPath')} InvocationID={state.get('InvocationID')} "
                f"(before: {before or 'not recorded'})")
        if state.get("NeedDaemonReload") == "yes":
            raise AnsibleActionFail(
                f"restoration not proven: systemd runs a version of {unit} other than its files (NeedDaemonReload=yes, "
                f"invocation {state.get('InvocationID')}): its files changed after systemd loaded them. Run "
                f"rollback.yml (it reloads and restarts {unit} so what runs is what the files say)")
        owner = self._execute_module(module_name="port_owner", task_vars=self.task_vars, module_args={
            "unit": unit, "base_url": a["base_url"]})
        proof["owner"] = owner.get("owner")
        if owner.get("failed"):
            raise AnsibleActionFail(f"restoration not proven: {owner.get('msg', owner)}")
        for entry in a["files"]:
            stat = self.module("ansible.builtin.stat", path=entry["path"], checksum_algorithm="sha256").get("stat", {})
            if stat.get("checksum", "") != entry["sha256"]:
                raise AnsibleActionFail(f"{entry['path']}: sha256 {stat.get('checksum', 'missing')}, "
                                        f"snapshot {entry['sha256']}")
            proof["files"].append(entry)
        if a.get("runtime") in ("docker", "podman") and a.get("container"):
            inspect = self.module("ansible.builtin.command", argv=inspect_identity_argv(a["runtime"], a["container"]))
            proof["container"] = inspect.get("stdout", "").strip() or None  # none under --check (not run)
        if proof["container"]:
            try:
                problems = identity_problems(proof["container"], a["container"], a.get("image"))
            except ValueError as exc:
                raise AnsibleActionFail(f"restored container: {exc}") from exc
            if problems:
                raise AnsibleActionFail(f"restored container: {'; '.join(problems)} (inspect: {proof['container']})")
        scan = self.module("journal_scan", unit=unit, engine=a["engine"], known_noise=a.get("known_noise") or [],
                           extra_error_patterns=a.get("extra_error_patterns") or [],
                           env_files=a.get("env_files") or [])["scan"]
        proof["scan"] = scan
        # Ready is HTTP's (the restore waited for the health route); the log must show no crash and no error
        # signature the original's own healthy start did not have.
        failure = log_failure(scan)  # errors, and warnings its own start did not print
        if failure:
            raise AnsibleActionFail(f"restored invocation {scan.get('invocation_id')} (phase {scan.get('phase')}): "
                                    f"{failure}")
        gates = a.get("gates") or []
        records = self.module("engine_gate", base_url=a["base_url"], runs=[{"gate": gate} for gate in gates],
                              model=a["model"], **({"api_key_var": a["api_key_var"]} if a.get("api_key_var") else {}),
                              env_files=a.get("env_files") or [], timeout_s=a["gate_timeout_s"],
                              phase="restored", fail_on_fail=False)["records"] if gates else []
        proof["gates"] += records  # every gate in one module run; the first that failed is named
        failed = next((record for record in records if record.get("verdict") != "pass"), None)
        if failed:
            raise AnsibleActionFail(f"gate {failed['gate']} failed (restored): {failed.get('reason')}")
