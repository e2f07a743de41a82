"""The engine connection's option, documented once for every module and action that takes it."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  connection:
    description: >-
      The engine connection as one value - {base_url, model, api_key_var, env_files} (the rollout role's
      _rollout_connection); an argument given on its own wins over the connection's.
    type: dict
    default: {}
    suboptions:
      base_url: {description: The engine's base URL., type: str}
      model: {description: The served model name., type: str}
      api_key_var: {description: The variable that holds the API key (read on the host)., type: str}
      env_files: {description: The unit's EnvironmentFiles (the key's source)., type: list, elements: path}
"""
