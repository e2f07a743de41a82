"""serving_recipe's logic: the original unit read as systemd runs it (its files, systemd's own reading, what runs
now), its recipe adopted and redacted, its NCCL configuration; a candidate refused with its reason or rendered one
control away and written; a written candidate compared. library/serving_recipe.py is its wrapper: `host` gives the
commands (host_commands' runner), check mode, diff mode and the module's warnings."""

import hashlib
import os

from .engine_adapters import engine_env_sources
from .engine_build import (
    BuildError,
    delta,
    engine_words,
    interpreter,
    probe_argv,
    read_probe,
    refusal,
)
from .host_commands import ModuleFailure
from .host_files import write_atomic
from .nccl_config import change_problem, read_sources, running_environment, summary
from .recipe_adopt import managed_recipe
from .systemd_reading import ReadingError, unit_reading
from .unit_oracle import running_reading
from .unit_recipe import (
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
from .unit_shapes import (
    ShapeError,
    adopt,
    candidate_refusal,
    complete_facts,
    finding_line,
    ignored_note,
)

SHOW_PROPS = ("FragmentPath", "DropInPaths", "UnitFileState", "ActiveState", "SubState", "NRestarts",
              "InvocationID", "NeedDaemonReload", "ExecMainPID")


def systemctl_show(host, unit):
    rc, out, err = host.run(["systemctl", "show", "-p", ",".join(SHOW_PROPS), "--", unit])
    if rc != 0:
        template = (f"; {unit} is a template: its %i (the instance name) is empty; adopt an instance "
                    f"({unit.replace('@.', '@NAME.', 1)})") if "@." in unit else ""
        raise ModuleFailure(f"systemctl show {unit} failed: {err.strip()}{template}")
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if not state.get("FragmentPath"):
        raise ModuleFailure(f"serving unit {unit!r} not found on this host (no FragmentPath)", unit=state)
    return state


def read(host, path, kind):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ModuleFailure(f"cannot read {kind} {path}: {exc.strerror}") from exc
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


def nccl_configuration(host, recipe, sections, state):
    """Every source of NCCL settings for this unit, with precedence, and the running truth."""
    user = (values(sections, "Service", "User") or ["root"])[-1]
    home = home_of(user)

    def run(argv):
        # A missing runtime or interpreter is a note in the capture, never a module failure.
        if not (os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK)) and not host.which(argv[0]):
            return 127, "", f"{argv[0]} not found"
        return host.run(argv)

    sources, notes = read_sources(recipe, home, read_optional, run)
    running = None
    if recipe["runtime"] == "process" and state.get("ActiveState") == "active":
        running = running_environment(state.get("ExecMainPID"), read_bytes, child_pids)
    return {**summary(sources, running), "notes": notes, "service_user": user}


def write_copy(host, path, source, text, result):
    """The candidate's own copy of an EnvironmentFile: same owner and mode as the original (it may
    hold secrets; its content never leaves the host)."""
    if read_optional(path) == text:
        return
    result["changed"] = True
    if host.check_mode:
        return
    info = os.stat(source)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_atomic(path, text, info.st_mode & 0o7777, (info.st_uid, info.st_gid))


def write_unit(host, dest, content, result):
    """Write the rendered unit (the one renderer, render_sections) when it differs; the raw text
    never leaves the host: the result and --diff carry it redacted."""
    before = read_optional(dest)
    result["candidate"]["dest"] = dest
    if before == content:
        return
    result["changed"] = True
    if host.diff:
        result["diff"] = {"before": redact_unit_text(before or ""), "after": redact_unit_text(content),
                          "before_header": dest, "after_header": dest}
    if host.check_mode:
        return
    write_atomic(dest, content, 0o644)


def read_unit(host, unit):
    """The unit as systemd runs it: its files read, systemd's own reading (the judge; its probe, a transient
    unit, does not run in check mode) and the recipe adopted from both."""
    state = systemctl_show(host, unit)
    dropin_paths = state.get("DropInPaths", "").split()
    texts, files = {}, []
    for path, kind in [(state["FragmentPath"], "unit")] + [(p, "drop-in") for p in dropin_paths]:
        texts[path], info = read(host, path, kind)
        files.append(info)
    try:
        systemd = unit_reading(host.run, unit, list(texts), probe_it=not host.check_mode)
    except ReadingError as exc:
        raise ModuleFailure(f"{unit}: {exc}") from exc
    try:
        # Specifiers expanded, $VAR facts, refusals with the true reason.
        recipe = adopt(unit, state["FragmentPath"], lambda path: texts.get(path) or read_optional(path),
                       dropin_paths, systemd=systemd)
    except ShapeError as exc:
        raise ModuleFailure(f"{unit} refused: {exc}") from exc
    for finding in recipe["systemd"]["findings"]:
        host.warn(f"{unit}: {finding_line(finding)}")
    return state, texts[state["FragmentPath"]], files, recipe, systemd


def read_running(host, unit, state, recipe, reading):
    """What runs now, from the kernel: shown beside systemd's reading (the process may predate an edit)."""
    pid = state.get("ExecMainPID", "0")
    if state.get("ActiveState") != "active" or pid in ("", "0") or not reading.get("expanded_argv"):
        return
    running = running_reading(read_bytes(f"/proc/{pid}/cmdline"), reading["expanded_argv"], redact_argv)
    recipe["systemd"]["running"] = {"pid": int(pid), **running}
    if not running["matches"]:
        host.warn(f"{unit}: the running main process (pid {pid}) was started with another command "
                    f"line than systemd would start now ({running['edits']}): restart it, or the original "
                    "restored after a candidate is not the one that ran before")


def refuse_candidate(host, params, recipe, sections, nccl, env_texts, result):
    """A candidate this unit cannot have is refused with its reason, before anything is rendered (the
    EnvironmentFiles' texts, kept on the host, name a line systemd ignores)."""
    credentials = inline_credentials(sections)
    if credentials:
        raise ModuleFailure(f"candidate refused before any change: the unit gives a credential inline "
                            f"({', '.join(credentials)}); a candidate would copy it into a unit file of its own. "
                            "Move it to a file the unit loads (LoadCredential=ID:PATH or LoadCredentialEncrypted=)",
                            **result)
    problem = candidate_refusal(params["unit"], recipe, params["change"], params["accept_systemd_reading"])
    if problem:
        raise ModuleFailure(f"candidate refused: {problem}", **result)
    secrets = inline_secrets(recipe)
    if secrets:
        raise ModuleFailure(f"the unit holds inline secret values ({', '.join(secrets)}); move them to "
                            "an EnvironmentFile so a candidate can reference them without copying", **result)
    change = params["change"]
    # the value NCCL will really see: what the engine sets itself when the unit leaves a variable unset counts too
    problem = change_problem(nccl["sources"] + engine_env_sources(recipe["engine"]), change.get("name"),
                             change.get("value")) \
        if change.get("kind") == "env" else None
    if problem:  # a line systemd ignores is why the variable reads as it does: said first
        raise ModuleFailure(f"candidate refused: {ignored_note(env_texts, change.get('name'))}{problem}", **result)


def render_candidate(host, params, recipe, sections, env_texts, result):
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
        raise ModuleFailure(f"candidate refused: {exc}", **result) from exc
    content = "".join(f"# {line}\n" for line in params["header"]) + rendered
    result["candidate"] = {"difference": difference, "sha256": hashlib.sha256(content.encode()).hexdigest(),
                           "text_redacted": redact_unit_text(content)}
    result["candidate"]["env_file_copies"] = [
        {"path": path, "source": source, "sha256": hashlib.sha256(text.encode()).hexdigest()}
        for path, (source, text) in copies.items()]
    if params["dest"]:
        for path, (source, text) in copies.items():
            write_copy(host, path, source, text, result)
        write_unit(host, params["dest"], content, result)


def compare(host, params, recipe, env_texts, result):
    """compare_path: the written candidate's difference from the original (the change names the declared control
    it may differ in)."""
    other_text, info = read(host, params["compare_path"], "candidate unit")
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
        raise ModuleFailure(f"{params['compare_path']} refused: {exc}", **result) from exc


def ask_build(host, program, engine, words=None):
    """One build's own report: its versions and, with `words`, its parser's reading of them
    (module_utils/engine_build)."""
    if not (os.path.isfile(program) and os.access(program, os.X_OK)):
        raise BuildError(f"{program} is not an executable file on the host: not an installed build of {engine}")
    with open(program, "rb") as handle:
        first_line = handle.readline(256).decode("utf-8", "replace").strip()
    rc, out, err = host.run(probe_argv(interpreter(program, first_line), engine, words))
    return read_probe(program, engine, rc, out, err, words)


def check_build(host, params, recipe, result):
    """An engine build (change kind program): both builds asked for their versions and the new build's own parser
    for the original's arguments as systemd expands them, before anything is rendered; a refusal names the flag and
    the release, a deprecation is warned about."""
    program = params["change"].get("value")
    words = engine_words((recipe.get("shape") or {}).get("expanded_argv") or recipe["argv"])
    try:
        if recipe["runtime"] != "process" or not recipe.get("program"):
            raise BuildError(f"a {recipe['runtime']} unit's engine build is its image (engine-image), not a program")
        original = ask_build(host, recipe["program"], recipe["engine"])
        candidate = ask_build(host, str(program), recipe["engine"], words)
    except BuildError as exc:
        raise ModuleFailure(f"candidate refused before any change: {exc}", **result) from exc
    result["build"] = {"original": original, "candidate": candidate, "delta": delta(original, candidate)}
    for line in candidate["args"]["deprecated"]:
        host.warn(f"{program} ({candidate['version']}) on the original's arguments: {line}")
    problem = refusal(original, candidate)
    if problem:
        raise ModuleFailure(f"candidate refused before any change: {problem}", **result)


def read_recipe(host, params):
    """serving_recipe's reading of params["unit"] (its arguments as params): the unit as systemd runs it, its files,
    its recipe redacted, its NCCL configuration; with a change, the candidate refused or rendered (and written to
    dest); with compare_path, a written candidate's one difference. The module's result, or ModuleFailure."""
    state, text, files, recipe, reading = read_unit(host, params["unit"])
    read_running(host, params["unit"], state, recipe, reading)
    # Kept on the host: the expanded sections (a candidate keeps every specifier's value as text)
    # and the EnvironmentFiles' contents, which never leave the host.
    sections, env_texts = recipe.pop("sections"), recipe.pop("env_file_texts")
    for path in env_texts:
        files.append(read(host, path, "EnvironmentFile")[1])
    result = {"changed": False, "unit": {"name": params["unit"], **state}, "files": files,
              "recipe": redacted(recipe), "text_redacted": redact_unit_text(text)}
    if params["require_digest"] and recipe["runtime"] != "process" and not recipe["image_digest"]:
        raise ModuleFailure(f"image {recipe['image']!r} is not pinned by digest (@sha256:...); "
                             "restoration must be exact", **result)
    nccl = nccl_configuration(host, recipe, sections, state)
    result["recipe"]["nccl_config"] = nccl
    if params["managed"]:
        managed, problems = managed_recipe(params["unit"], recipe, sections)
        result["managed"] = {"recipe": managed, "problems": problems}
    if params["change"] is not None and not params["compare_path"]:
        refuse_candidate(host, params, recipe, sections, nccl, env_texts, result)
        if params["read_build"] and params["change"].get("kind") == "program":
            check_build(host, params, recipe, result)
        render_candidate(host, params, recipe, sections, env_texts, result)
    if params["compare_path"]:
        compare(host, params, recipe, env_texts, result)
    return result
