"""Action plugin: the A/B verdicts of matched baseline/candidate cells and the run's decision, on the
controller (numpy and scipy are the controller's, never the host's). The statistics are
serving_rollout/play/abstats.py's; this file matches the arms' cells and calls them.
Documentation: library/ab_verdict.py."""

from ansible.errors import AnsibleActionFail

from serving_rollout.play import arm
from serving_rollout.play.actions import PlayAction


class ActionModule(PlayAction):
    def step(self, p, task_vars):
        try:
            from serving_rollout.play.abstats import cell_verdict, decide
        except ImportError as exc:
            raise AnsibleActionFail(f"ab_verdict needs numpy and scipy on the controller: {exc}") from exc
        try:
            cells = arm.matched_cells(p["arms"])
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        # alpha is split over the cells (error control at the decision: module_utils/abstats.METHOD)
        verdicts = [cell_verdict(c, p["min_effect"], p["alpha"], p["drift_limit"], rule=p["rule"],
                                 cells=len(cells), condition_limits=p["condition_limits"]) for c in cells]
        return {"changed": False, "cells": verdicts, "decision": decide(verdicts, p["rule"], p["max_failed_requests"])}
