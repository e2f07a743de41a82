"""Action plugin: a managed host's promotion as a patch to the inventory file that holds its recipe (and the
patch that reverts it), written on the controller; with write, the inventory file too. The work is
serving_rollout.recipe.promote's. Documentation: library/inventory_patch.py."""

from ansible.errors import AnsibleActionFail

from serving_rollout import recipe
from serving_rollout.module_utils.recipe_render import RecipeRenderError
from serving_rollout.play.actions import PlayAction


class ActionModule(PlayAction):
    def step(self, p, task_vars):
        if self._task.check_mode:
            return {"changed": p["write"], "msg": "check mode: no patch written"}
        try:
            result = recipe.promote(p["inventory_dir"], p["host"], p["groups"], p["variable"], p["change"],
                                    p["out_dir"], write=p["write"])
        except (recipe.RecipeError, RecipeRenderError, ValueError, OSError) as exc:
            raise AnsibleActionFail(f"no inventory patch: {exc}") from None
        return {"changed": p["write"], **result}
