"""Managed mode on the controller: a serving recipe checked against its schema (errors by path) and the
rules a schema cannot say, rendered, and changed in one control through the controls catalog; the
promotion of a control as a patch to the inventory file that holds the recipe. Rendering itself is
module_utils/recipe_render.py's (pure, shared with the host side). docs/managed-mode.md."""

import difflib
import io
from pathlib import Path

from serving_rollout.candidate_plan import schema_errors
from serving_rollout.module_utils import recipe_render
from serving_rollout.module_utils.engine_adapters import base_url

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schemas" / "serving-recipe.schema.json"


class RecipeError(ValueError):
    """A recipe refused, naming where and why."""


def recipe_errors(recipe):
    """Every schema error ($.path: what) and every rule the schema cannot say; [] when the recipe is good."""
    errors = schema_errors(SCHEMA_FILE, recipe)
    if errors or not isinstance(recipe, dict):
        return errors
    return [f"$.{problem}" for problem in recipe_render.recipe_problems(recipe)]


def checked(recipe):
    errors = recipe_errors(recipe)
    if errors:
        raise RecipeError("bad serving recipe: " + "; ".join(errors))
    return recipe


def recipe_files(recipe, header=None):
    """{path: text} of every file the recipe becomes on the host (unit or Quadlet, drop-ins); the managed
    header unless another is given (a candidate's)."""
    return recipe_render.rendered_files(checked(recipe), recipe_render.MANAGED_HEADER if header is None else header)


WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def managed_base_url(recipe):
    """Where a managed recipe's engine answers on its host: the address it binds (the loopback for a
    wildcard), its port, else the engine's default. '' when the port is a ${VAR} the recipe's own
    environment does not hold (it is in an EnvironmentFile on the host, which the controller never reads)."""
    args = recipe.get("engine_args") or {}
    host = str(recipe.get("host") or args.get("--host") or "")
    port = str(recipe.get("port") or args.get("--port") or "")
    if recipe_render.REFERENCE.match(port):
        port = str((recipe.get("environment") or {}).get(port.strip("${}"), ""))
        if not port:
            return ""
    if recipe_render.REFERENCE.match(host):
        host = ""
    host = "127.0.0.1" if host in WILDCARD_HOSTS else (f"[{host}]" if ":" in host and "[" not in host else host)
    return base_url(recipe["engine"], {"--port": port} if port else {}, host)


def candidate_recipe(recipe, change, candidate_unit):
    """The recipe with the one control changed, as the candidate unit: its own unit name and, for a
    container, its own container name (the original's plus -candidate)."""
    if checked(recipe).get("output") == "quadlet":
        # Its candidate would be a Quadlet too, whose unit only podman's generator makes (and the lab's podman
        # has none to prove it with): refused before anything is written rather than compared unproven.
        raise RecipeError(f"{recipe['unit']} is rendered as a Quadlet: a candidate of a Quadlet original is not "
                          "supported yet (render it as output: service to roll candidates out)")
    changed = recipe_render.apply_control(recipe, change)
    changed["unit"] = candidate_unit
    if changed["runtime"]["kind"] == "container":
        changed["runtime"]["name"] = changed["runtime"]["name"] + "-candidate"
    return checked(changed)


def _yaml():
    from ruamel.yaml import YAML

    yaml = YAML()  # round trip: the file's comments, order and quoting stay as the operator wrote them
    yaml.preserve_quotes = True
    yaml.width = 4096
    return yaml


def find_recipe_file(inventory_files, variable):
    """The one inventory file (host_vars, group_vars) that sets `variable`, or RecipeError naming them all."""
    holders = []
    for path in inventory_files:
        try:
            data = _yaml().load(Path(path).read_text())
        except Exception:  # not YAML (an ini inventory): it cannot hold a recipe
            continue
        if isinstance(data, dict) and variable in data:
            holders.append(str(path))
    if len(holders) != 1:
        raise RecipeError(f"{variable} must be set in exactly one inventory file to be patched; found it in "
                          f"{holders or 'none'} of {[str(p) for p in inventory_files]}")
    return holders[0]


def _set_path(node, change, recipe):
    kind, name, value = change.get("kind"), change.get("name"), change.get("value")
    if kind == "env":
        env = node.setdefault("environment", {})
        if value is None:
            del env[name]
        else:
            env[name] = str(value)
    elif kind == "image":
        node["runtime"]["image"] = value
    else:  # arg, speculative: what apply_control did to the fields and engine_args, key by key
        after = recipe_render.apply_control(recipe, change)
        for key in [k for k in recipe_render.FIELD_ORDER if recipe.get(k) != after.get(k)]:
            node[key] = after[key]
        args = node.setdefault("engine_args", {})
        for flag in [f for f in list(args) if f not in after.get("engine_args", {})]:
            del args[flag]
        for flag, flag_value in after.get("engine_args", {}).items():
            if args.get(flag) != flag_value:
                args[flag] = flag_value


def promotion_patch(path, variable, change, label=None):
    """(new_text, unified_diff) of the inventory file holding the recipe with the one control changed;
    only those lines move (comments, order and the rest of the file as they were). `label`: the file's
    name in the patch (relative to the inventory folder, for `patch -p1 -d INVENTORY`)."""
    text = Path(path).read_text()
    yaml = _yaml()
    yaml.explicit_start = text.lstrip().startswith("---")
    data = yaml.load(text)
    recipe = checked(_plain(data[variable]))
    expected = recipe_render.apply_control(recipe, change)
    _set_path(data[variable], change, recipe)
    if _plain(data[variable]) != expected:
        raise RecipeError(f"{path}: the patched {variable} is not the recipe with {change} applied")
    checked(_plain(data[variable]))
    out = io.StringIO()
    yaml.dump(data, out)
    new_text = out.getvalue()
    label = label or Path(path).name
    diff = "".join(difflib.unified_diff(text.splitlines(True), new_text.splitlines(True), f"a/{label}", f"b/{label}"))
    return new_text, diff


def _plain(node):
    """ruamel's round-trip nodes as plain dicts, lists and scalars (what the schema checks)."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return str(node)


def inventory_files(inventory_dir, host, groups):
    """The YAML files of an inventory folder that can set a host's variables: host_vars first, then the
    groups' (all included), each as a file or a folder of files."""
    base, found = Path(inventory_dir), []
    for kind, name in [("host_vars", host)] + [("group_vars", g) for g in [*groups, "all"]]:
        for suffix in (".yml", ".yaml", ""):
            path = base / kind / f"{name}{suffix}"
            if path.is_file():
                found.append(path)
        folder = base / kind / name
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml"))
    return found


def promote(inventory_dir, host, groups, variable, change, out_dir, write=False):
    """The promotion of a managed host's candidate: the patch (and its reverse) to the inventory file that
    holds the recipe, written to out_dir; with write, the inventory file itself too. Returns what to show."""
    path = find_recipe_file(inventory_files(inventory_dir, host, groups), variable)
    label = str(Path(path).relative_to(inventory_dir))
    before = Path(path).read_text()
    after, patch = promotion_patch(path, variable, change, label)
    revert = "".join(difflib.unified_diff(after.splitlines(True), before.splitlines(True), f"a/{label}", f"b/{label}"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "inventory.patch").write_text(patch)
    (out / "inventory-revert.patch").write_text(revert)
    (out / "recipe-before.yml").write_text(before)
    (out / "recipe-after.yml").write_text(after)
    if write:
        Path(path).write_text(after)
    return {"file": path, "patch": patch, "written": write, "out": str(out)}
