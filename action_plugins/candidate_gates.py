"""Action plugin: the candidate's correctness gates, from the controller. The gates run on the host in one module
run (engine_gate's runs, where the API key stays), in order: every gate of `gates` not named in `not_qualified`,
then, with a `router_url`, the smoke and JSON gates through the router. Every gate runs even after one fails,
so the evidence shows them all; the action then fails naming the first that failed. Gates that cannot be
meaningful on the host's model are records with verdict not-qualified (never run, never passed). With
`numerics` (the original's reference answers and the control's tolerance), once every gate passed, the same
greedy prompts are asked of the candidate (numerics_probe) and a result beyond the tolerance fails it.
Documentation: library/candidate_gates.py."""

from ansible.errors import AnsibleActionFail

from serving_rollout.module_utils.gates import failed_gate_message, not_qualified_records
from serving_rollout.module_utils.unit_stop import engine_changed
from serving_rollout.play.actions import StepsAction

# The gates that also go through the router: what a client behind it meets first.
ROUTED = ("smoke", "json")
# What the numerics probe takes from `numerics` (the rest of its arguments are the gates' own).
NUMERICS_KEYS = ("prompts", "tokens", "reference", "tolerance", "timeout_s")


class ActionModule(StepsAction):
    def initial(self):
        return {"changed": False, "records": [], "numerics": None}

    def steps(self, args, steps, done):
        not_qualified = args.get("not_qualified") or {}
        try:
            skipped = not_qualified_records(not_qualified, list(args["gates"]), "candidate")
        except ValueError as exc:
            raise AnsibleActionFail(f"candidate_gates: {exc}") from exc
        common = {"model": args["model"], "env_files": args.get("env_files") or [], "timeout_s": args["timeout_s"],
                  **({"api_key_var": args["api_key_var"]} if args.get("api_key_var") else {})}
        sized = {key: args[key] for key in ("target_tokens", "depth", "contract_words") if args.get(key) is not None}
        # one module run for them all (the routed ones through the router's URL; smoke and JSON take no size)
        runs = [{"gate": gate} for gate in args["gates"] if gate not in not_qualified]
        runs += [{"gate": gate, "base_url": args["router_url"], "phase": "candidate-routed"}
                 for gate in ROUTED if args.get("router_url")]
        records = steps.module(f"gates {', '.join(run['gate'] for run in runs)} (candidate)", "engine_gate",
                               base_url=args["base_url"], phase="candidate", runs=runs, **common,
                               **sized)["records"] if runs else []
        for record in records:
            done["records"].append(record)
            steps.say(f"gate {record['gate']} ({record['phase']}): {record['verdict']}"
                      f"{'' if record['verdict'] == 'pass' else ' - ' + str(record.get('reason'))}")
        done["records"] += skipped
        failed = [record for record in done["records"] if record["verdict"] not in ("pass", "not-qualified")]
        if failed:
            raise AnsibleActionFail(self.crashed(args, steps) or failed_gate_message(failed[0]))
        if args.get("numerics"):
            self.numerics(args, steps, done, common)

    @staticmethod
    def numerics(args, steps, done, common):
        """Silent corruption passes every gate and every latency cell: the original's greedy prompts, judged by
        the control's numerics tolerance (module_utils/equivalence.py)."""
        probe = args["numerics"]
        record = steps.module("probe the candidate's numbers against the original's", "numerics_probe",
                              base_url=args["base_url"], phase="candidate",
                              **{**common, **{key: probe[key] for key in probe if key in NUMERICS_KEYS}})["record"]
        done["numerics"] = record
        if record["verdict"] not in ("pass", "recorded"):
            raise AnsibleActionFail(f"numerics ({args.get('numerics_label') or 'candidate'}): {record['reason']}")

    @staticmethod
    def crashed(args, steps):
        """The candidate engine's exit or restart since it became ready, with the first failed gate beside it, or
        None (a gate that fails against a living engine is the gate's own failure)."""
        if not args.get("candidate_unit"):
            return None
        status = steps.module(f"read {args['candidate_unit']}", "ansible.builtin.systemd_service",
                              name=args["candidate_unit"]).get("status") or {}
        changed = engine_changed(args.get("candidate_identity") or {}, status, "gates")
        first = next(r for r in steps.done["records"] if r["verdict"] not in ("pass", "not-qualified"))
        return f"{changed} (first failed gate: {failed_gate_message(first)})" if changed else None
