"""Action plugin: one cell of one A/B arm, chunk by chunk, from the controller.

It runs each chunk on the host (latency_cell, where the API key stays), which first checks the run may go on
(the lock is still this run's, the watchdog's lease renewed in the candidate arm; systemd: the candidate
engine is the one that became ready) and, after the candidate arm's chunks, checks again; it shows the
progress, and in the candidate arm looks at the cell so far (sequential: it stops at the first
clear look). Returns the merged cell in the shape ab_verdict takes, and the progress fact
bin/serving-rollout reads. An endurance cell (duration_s) is judged here too, with the candidate's
journal read after it. The statistics and the chunks' records are module_utils' (arm.py,
abstats.py, cells.py); this file only drives them. Documentation: library/latency_arm.py."""

import time

from ansible.errors import AnsibleActionFail
from ansible.utils.display import Display

from serving_rollout.module_utils import engine_metrics
from serving_rollout.play import arm
from serving_rollout.play.actions import PlayAction

display = Display()

# An endurance cell's chunks run on the host a slice at a time (latency_cell's for_s): one round trip a slice, and
# a progress line between slices (the host checks the lock and the candidate before every chunk).
ENDURANCE_SLICE_S = 10.0

# What latency_cell takes from this task as it is; the plugin sets name, arm, first_index, requests,
# reference_conditions and the remeasure settings itself.
CELL_ARGS = ("base_url", "model", "api_key_var", "env_files", "contract_words", "contract", "timeout_s",
             "concurrency", "remeasure_max", "condition_limits", "engine")


class CellFailed(Exception):
    """A chunk that failed or a hang: the arm's failed result, its cause named."""


class ActionModule(PlayAction):
    def step(self, args, task_vars):
        try:
            name = args["cell"]["name"]
            # a throughput cell carries its own concurrency (and requests): whole waves per chunk
            shape = arm.cell_shape(args["cell"], int(args["requests"]), int(args["chunk"]), int(args["bracket"]),
                                   int(args.get("concurrency") or 1))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"latency_arm: bad arguments: {exc!r} in {dict(args)!r:.300}") from exc
        try:
            if float(args.get("duration_s") or 0) > 0:
                return self.endurance(args, task_vars, name, shape)
            return self.measured_cell(args, task_vars, name, shape)
        except CellFailed as exc:  # the arm's failure, its cause named; a refusal to go on is raised as it is
            return {"failed": True, "msg": str(exc)}

    def chunk(self, args, task_vars, name, start, **cell_args):
        """One chunk of the cell on the host (latency_cell), its refusals raised and its failures named."""
        result = self._execute_module(module_name="latency_cell", task_vars=task_vars, module_args={
            **{key: args[key] for key in CELL_ARGS if args.get(key) is not None},
            "name": name, "arm": args["arm"], "prompt_tokens": args["cell"]["prompt_tokens"], "first_index": start,
            **cell_args, **self.guard(args)})
        if result.get("stopped"):  # the run may not go on: another run took the lock, the candidate crashed
            raise AnsibleActionFail(result["stopped"])
        if result.get("failed") or result.get("lease_problem"):
            raise CellFailed(f"cell {name} {args['arm']}, requests {start + 1}..: "
                             f"{result.get('lease_problem') or result.get('msg', result)}")
        return result

    def measured_cell(self, args, task_vars, name, shape):
        """A cell of an arm: chunk after chunk, its first warmed with the cell's shape; in the candidate arm a hang
        ends it at once and each chunk is a sequential look against the first bracket (stopping at a clear one)."""
        requests, chunk, bracket, concurrency = shape
        n = arm.cell_size(args["arm"], requests, chunk, bracket, args["sequential"])
        first = next((c for c in args.get("first_bracket") or [] if c.get("name") == name), None)
        reference = first.get("conditions") if first and args["arm"] != "baseline-1" else None
        looks = args["arm"] == "candidate" and args["sequential"] and first is not None
        chunks, look, started, start = [], {}, time.monotonic(), 0
        while start < n and not look.get("stop"):
            if chunks:
                display.display(f"{task_vars.get('inventory_hostname', 'host')}: cell {name} {args['arm']}: "
                                f"{arm.progress(arm.merge_chunks(chunks), n)}")
            result = self.chunk(args, task_vars, name, start, requests=min(chunk, n - start), concurrency=concurrency,
                                warmup=(args["warmup_waves"] * concurrency) if start == 0 else 0,
                                **({"reference_conditions": reference} if reference else {}))
            chunks.append(result["cell"])
            hang = arm.stalled(result["cell"], args.get("timeout_s") or 600) if args["arm"] == "candidate" else None
            if hang:
                raise CellFailed(f"cell {name} {args['arm']}, requests {start + 1}..: {hang}")
            start += len(result["cell"]["requests"])
            if looks:
                look = arm.look_at(arm.merge_chunks(chunks), first, look=len(chunks), requests=requests, chunk=chunk,
                                   bracket=bracket, alpha=args["alpha"], cells=args["cells"],
                                   min_effect=args["min_effect"], rule=args.get("rule"))
        return self.cell_result(args, task_vars, name, result, chunks, started, look)

    def endurance(self, args, task_vars, name, shape):
        """The endurance cell: chunk after chunk on the host, a slice of its time a round trip, until its time is up
        or its first failure (a hang or an error is its verdict already); judged with the candidate's journal."""
        duration_s, concurrency = float(args["duration_s"]), shape[3]
        chunks, started, start = [], time.monotonic(), 0
        deadline = started + duration_s
        while not chunks or (time.monotonic() < deadline and not arm.merge_chunks(chunks)["failures"]):
            if chunks:
                display.display(f"{task_vars.get('inventory_hostname', 'host')}: cell {name} {args['arm']}: "
                                f"{arm.progress(arm.merge_chunks(chunks), f'a {duration_s:g} s run')}")
            result = self.chunk(args, task_vars, name, start, requests=shape[1], concurrency=concurrency, warmup=0,
                                for_s=min(ENDURANCE_SLICE_S, max(deadline - time.monotonic(), 0.001)))
            chunks += result["chunks"]
            start += sum(len(c["requests"]) for c in result["chunks"])
        return self.endured(args, task_vars, self.cell_result(args, task_vars, name, result, chunks, started, {}),
                            duration_s)

    def cell_result(self, args, task_vars, name, last, chunks, started, look):
        """The merged cell as ab_verdict takes it, with its wall time (the chunks' own time plus the checks between
        them) and the progress fact; a candidate that exited or restarted after its last chunk is never a result."""
        if last.get("stopped_after"):
            raise AnsibleActionFail(last["stopped_after"])
        cell = dict(arm.merge_chunks(chunks), wall_s=round(time.monotonic() - started, 1),
                    **({"sequential": look} if look else {}))
        if args["arm"] == "candidate" and args["accept_length_from_log"]:
            cell = self.with_logged_accept_length(args, task_vars, cell)
        display.display(f"{task_vars.get('inventory_hostname', 'host')}: cell {name} {args['arm']}: "
                        f"{arm.summary(cell)}")
        return {"changed": False, "cell": cell, "ansible_facts": {"rollout_progress": {
            "kind": "cell", "cell": name, "arm": args["arm"], "requests": len(cell["requests"]),
            "failures": cell["failures"]}}}

    def endured(self, args, task_vars, result, duration_s):
        """The endurance cell's verdict (serving_rollout/play/arm.py) and the candidate's journal read after it: a
        hang, a failed request, drift, a crash or an error line new under load fails it, both kept."""
        scan = self._execute_module(module_name="journal_scan", task_vars=task_vars, module_args={
            "unit": args["candidate_unit"], "engine": args["engine"], "known_noise": args.get("known_noise") or [],
            "extra_error_patterns": args.get("extra_error_patterns") or [], "env_files": args.get("env_files") or []})
        if scan.get("failed"):
            return {**result, "failed": True, "msg": f"read {args['candidate_unit']}'s journal: {scan.get('msg')}"}
        try:
            verdict = arm.endurance_judgement(result["cell"], duration_s, float(args.get("drift_limit", 0.1)),
                                              float(args["timeout_s"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"latency_arm: endurance: {exc}") from exc
        failure = arm.endurance_failure(verdict, scan["scan"])
        return {**result, "verdict": verdict, "scan": scan["scan"],
                **({"failed": True, "msg": failure} if failure else {})}

    def with_logged_accept_length(self, args, task_vars, cell):
        """A speculative candidate whose /metrics gave no accept length (SGLang without --enable-metrics): the
        engine's own log line for it (vLLM's SpecDecoding metrics, SGLang's decode lines), read once after the
        cell, kept as engine_log with its source beside the engine's /metrics figures."""
        if cell.get("engine_metrics") and engine_metrics.figures(cell["engine_metrics"])["accept_length"]:
            return cell
        scan = self._execute_module(module_name="journal_scan", task_vars=task_vars, module_args={
            "unit": args["candidate_unit"], "engine": args["engine"], "env_files": args.get("env_files") or [],
            "excerpt_lines": 0})
        if scan.get("failed"):
            raise AnsibleActionFail(f"read {args['candidate_unit']}'s journal: {scan.get('msg')}")
        return dict(cell, engine_log={"accept_length": scan["scan"]["accept_length"]})

    @staticmethod
    def guard(args):
        """What latency_cell checks on the host before a chunk: the lock still this run's (every arm); in the
        candidate arm the watchdog's lease renewed before and while it runs, the candidate engine the one that
        became ready, and both asked again after the chunk."""
        guard = {"lock_path": args["lock_path"], "lock_token": args["lock_token"]}
        if args["arm"] != "candidate":
            return guard
        return {**guard, **({"lease_s": int(args["lease_s"])} if args.get("lease_s") else {}), "check_after": True,
                "candidate_unit": args["candidate_unit"], "candidate_identity": args["candidate_identity"]}
