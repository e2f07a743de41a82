"""The one skeleton of this project's action plugins. An action's arguments are the options its documentation
(library/<name>.py, with its fragments) lists: Ansible's own validator checks and defaults them from that one
source before the action's step runs, so a wrong type or a missing argument is refused, named, before anything
on a host changes. The task's `connection` (the engine's base_url, model, api_key_var, env_files as one value)
fills those arguments the task left unset, where the action takes a connection."""

import ast
import functools
import inspect
from pathlib import Path

import yaml
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.plugin_docs import read_docstring
from ansible.plugins.action import ActionBase

from serving_rollout.module_utils.engine_client import connected

from .host_steps import HostSteps


def spec_of(options):
    """A documented options block as an argument spec (suboptions are the validator's options)."""
    return {name: {**{k: v for k, v in option.items() if k != "suboptions"},
                   **({"options": spec_of(option["suboptions"])} if option.get("suboptions") else {})}
            for name, option in (options or {}).items()}


def fragment_options(doc_path, name):
    """The options doc_fragments/<name>.py documents (beside library/): read from the project's own file, so an
    action validates the same way under any ansible.cfg (molecule's, an operator's)."""
    path = doc_path.parent.parent / "doc_fragments" / f"{name}.py"
    fragment = next((node for node in ast.parse(path.read_text()).body
                     if isinstance(node, ast.ClassDef) and node.name == "ModuleDocFragment"), None)
    text = next((n.value.value for n in getattr(fragment, "body", []) if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", None) == "DOCUMENTATION" for t in n.targets)), None)
    if text is None:
        raise AnsibleActionFail(f"{path}: no ModuleDocFragment.DOCUMENTATION for {doc_path.name}'s fragment {name}")
    return yaml.safe_load(text).get("options") or {}


@functools.cache
def documented_spec(doc_path):
    """The argument spec library/<name>.py documents for the action of the same name, its fragments merged."""
    doc = read_docstring(str(doc_path)).get("doc")
    if not doc:
        raise AnsibleActionFail(f"{doc_path} has no DOCUMENTATION to take the action's arguments from")
    options = {}
    for name in doc.get("extends_documentation_fragment") or []:
        options.update(fragment_options(doc_path, name))
    return spec_of({**options, **(doc.get("options") or {})})


class PlayAction(ActionBase):
    """Subclasses define step(params, task_vars) -> the task's result, and required(params) for arguments that
    another argument makes required. A bad argument, or a required one None or empty, fails the task naming it
    (AnsibleActionFail, as Ansible's own argument validation does) before the step runs."""

    TRANSFERS_FILES = False

    @classmethod
    def argument_spec(cls):
        """The options library/<name>.py documents for action_plugins/<name>.py: the first class of this one's
        lineage defined in a file with such documentation (a test's subclass of an action reads its action's)."""
        for klass in cls.__mro__:
            for value in vars(klass).values():
                if inspect.isfunction(value):
                    action = Path(inspect.getfile(value))
                    doc = action.parent.parent / "library" / action.name
                    if action.parent.name == "action_plugins" and doc.exists():
                        return documented_spec(doc.resolve())
                    break
        raise AnsibleActionFail(f"{cls.__name__}: no library/<name>.py documents this action's arguments")

    @property
    def _VALID_ARGS(self):  # an unknown option fails before validation (ActionBase.run reads this)
        return frozenset(self.argument_spec())

    def required(self, params):
        return ()

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        spec = self.argument_spec()
        args = dict(self._task.args)
        if "connection" in spec:  # the engine connection, one value, spread into its arguments
            args = {key: value for key, value in connected(args).items() if key in spec}
        validated = ArgumentSpecValidator(spec).validate(args)
        if validated.error_messages:
            given = {key: args[key] for key in args if key in spec and f"'{key}'" in " ".join(validated.error_messages)}
            raise AnsibleActionFail(f"{self._task.action}: {'; '.join(validated.error_messages)}"
                                    + (f" (given: {given!r:.300})" if given else ""))
        params = validated.validated_parameters
        # a required argument given empty is as missing as one not given (a default('') in a task)
        absent = [key for key in (*(k for k, o in spec.items() if o.get("required")), *self.required(params))
                  if params.get(key) in (None, "")]
        if absent:
            raise AnsibleActionFail(f"{self._task.action} needs {', '.join(absent)}; got "
                                    f"{sorted(k for k, v in params.items() if v not in (None, ''))}")
        return self.step(params, task_vars or {})

    def step(self, params, task_vars):
        raise NotImplementedError


class StepsAction(PlayAction):
    """An action that runs modules on the host one after another (HostSteps): `initial()` is the result it starts
    from, `steps(params, steps, done)` fills it; a failed step ends the action with its message and what was done
    until then."""

    def initial(self):
        return {"changed": False}

    def steps(self, params, steps, done):
        raise NotImplementedError

    def step(self, params, task_vars):
        done = self.initial()
        try:
            self.steps(params, HostSteps(self, task_vars, done), done)
        except AnsibleActionFail as exc:
            return {**done, **exc.result, "failed": True, "msg": exc.message}
        return done
