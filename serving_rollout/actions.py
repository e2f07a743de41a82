"""The skeleton of this project's action plugins that run a controller step in-process: arguments checked
and defaulted by the plugin's ARGUMENT_SPEC (the same validation a module gets), then its step."""

from ansible.plugins.action import ActionBase


class SpecAction(ActionBase):
    """Subclasses set ARGUMENT_SPEC and define step(params, task_vars) -> the task's result."""

    TRANSFERS_FILES = False
    ARGUMENT_SPEC = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._VALID_ARGS = frozenset(cls.ARGUMENT_SPEC)  # an unknown option fails before validation

    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        _, params = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        return self.step(params, task_vars or {})

    def step(self, params, task_vars):
        raise NotImplementedError
