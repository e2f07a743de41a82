"""The options of a module that sends the engine requests, documented once (their spec: engine_client.ENGINE_ARGS)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  base_url:
    description: Engine URL on the host, e.g. http://127.0.0.1:30000 (required, here or in C(connection)).
    type: str
  model:
    description: Model id sent in requests (C(default) when neither it nor C(connection) names one).
    type: str
  api_key_var:
    description: Name of the variable holding the API key in C(env_files).
    type: str
  env_files:
    description: EnvironmentFiles to read C(api_key_var) from.
    type: list
    elements: path
    default: []
"""
