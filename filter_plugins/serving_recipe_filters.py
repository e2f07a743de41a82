"""Filters of managed mode; the logic is serving_rollout.recipe's (and module_utils/recipe_render.py's)."""

from ansible.errors import AnsibleFilterError

from serving_rollout import recipe
from serving_rollout.module_utils.engine_adapters import base_url
from serving_rollout.module_utils.recipe_render import RecipeRenderError, launcher_word, recipe_difference


def recipe_base_url(recipe, host="127.0.0.1", port=None):
    """Where an adopted recipe's engine answers: `port`, else its --port, else the engine's default port."""
    if not isinstance(recipe, dict) or "engine" not in recipe:
        raise AnsibleFilterError(f"recipe_base_url takes an adopted recipe (with engine), got {recipe!r:.200}")
    try:
        return base_url(recipe["engine"], recipe.get("engine_args"), host, port)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def recipe_managed_base_url(document):
    """Where a managed recipe's engine answers ('' when its port is a ${VAR} held in an EnvironmentFile)."""
    if not isinstance(document, dict) or "engine" not in document:
        raise AnsibleFilterError(f"recipe_managed_base_url takes a serving recipe, got {document!r:.200}")
    try:
        return recipe.managed_base_url(document)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def recipe_errors(document):
    """Every error of a serving recipe ($.path: what), schema and rules; [] when it is good."""
    return recipe.recipe_errors(document)


def recipe_files(document, header=None):
    """{path: text} of the unit (or Quadlet) and drop-ins the recipe becomes (the managed header, or `header`)."""
    try:
        return recipe.recipe_files(document, None if header is None else list(header))
    except (recipe.RecipeError, RecipeRenderError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


def recipe_candidate(document, change, candidate_unit):
    """The recipe with the one control changed, as the never-enabled candidate unit."""
    try:
        return recipe.candidate_recipe(document, change, candidate_unit)
    except (recipe.RecipeError, RecipeRenderError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


def recipe_changes(before, after):
    """The fields two recipes differ in, as dotted paths: [{path, before, after}]."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        raise AnsibleFilterError(f"recipe_changes takes two recipes, got {type(before).__name__} "
                                 f"and {type(after).__name__}")
    return recipe_difference(before, after)


def recipe_launcher_word(document):
    """The last word of the recipe's engine launcher (the engine's flags follow it)."""
    try:
        return launcher_word(recipe.checked(document))
    except (recipe.RecipeError, KeyError) as exc:
        raise AnsibleFilterError(f"recipe_launcher_word: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"recipe_errors": recipe_errors, "recipe_files": recipe_files,
                "recipe_candidate": recipe_candidate,
                "recipe_changes": recipe_changes,
                "recipe_launcher_word": recipe_launcher_word,
                "recipe_base_url": recipe_base_url,
                "recipe_managed_base_url": recipe_managed_base_url}
