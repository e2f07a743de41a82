"""Ask systemd how it reads a unit: D-Bus properties through busctl (every Exec line's argv as
systemd split it, Environment, EnvironmentFiles with their '-' flags), `systemctl show --all`,
the load warnings `systemd-analyze verify` prints for the unit's files, and a transient probe
(`systemd-run --wait --pipe`) that systemd starts with the unit's Environment and
EnvironmentFiles, printing the environment and the argv after systemd's own $VAR expansion.

Each function takes run(argv) -> (rc, stdout, stderr) (AnsibleModule.run_command) and raises
ReadingError naming what failed; nothing here re-implements systemd's rules.
"""

import json
import os
import re

from .env_files import redact_line

PROBE = ("import json, os, sys\n"
         "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))\n")
# Set per invocation by systemd (or by the probe's interpreter): never something a unit asks for.
PER_RUN = {"INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "PWD", "SHLVL", "_", "LANG_PROBE"}


class ReadingError(RuntimeError):
    """systemd could not be asked (the message names the command and its error)."""


def object_path(unit):
    escaped = "".join(c if c.isalnum() else f"_{ord(c):02x}" for c in unit)
    return f"/org/freedesktop/systemd1/unit/{escaped}"


def busctl(run, unit, interface, prop):
    rc, out, err = run(["busctl", "--json=short", "get-property", "org.freedesktop.systemd1",
                        object_path(unit), f"org.freedesktop.systemd1.{interface}", prop])
    if rc != 0:
        raise ReadingError(f"systemd cannot say {prop} of {unit}: {err.strip()}")
    return json.loads(out)["data"]


def systemd_quote(value):
    """A value as one unit-file word: quoted, with specifiers and escapes kept literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def empty_parts(environment_files):
    """EnvironmentFile paths with an empty part (a '//' or a trailing '/'): a specifier such as %i expanded to
    nothing - a template's instance name, empty in the raw template or an instance named 'unit@.service'."""
    return [path for path, _ in environment_files if re.search(r"//|/$|/\.(?:env|conf)?$", path)]


def probe_failure(run, name, rc, err, environment_files):
    """Why the probe failed, in systemd's own words: its stderr, else the transient unit's journal (systemd writes
    "Failed to load environment files: No such file or directory" there, not to systemd-run's stderr), redacted;
    an EnvironmentFile path a specifier left empty named first."""
    said = err.strip()
    if not said:
        _, out, _ = run(["journalctl", "-u", name, "-o", "cat", "--no-pager", "-n", "20"])
        said = " | ".join(line.strip() for line in out.splitlines() if line.strip())
    said = redact_line(said[-400:], ()) if said else "nothing on stderr or in its journal"
    empty = empty_parts(environment_files)
    where = (f"EnvironmentFile {', '.join(empty)} has an empty part: a specifier (%i, the instance name) expanded to "
             "nothing - run the template as an instance (NAME@INSTANCE.service); ") if empty else ""
    return f"the environment probe (systemd-run) failed with exit code {rc}: {where}systemd says: {said}"


def probe(run, python, environment, environment_files, argv):
    """(environment, expanded argv) systemd gives a service with these Environment= and
    EnvironmentFile= settings running `python -c PROBE argv...` (argv[1:] of an ExecStart)."""
    name = f"serving-rollout-probe-{os.urandom(4).hex()}.service"  # named, so its journal can be read
    command = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", "-p", "Type=exec", f"--unit={name}"]
    for assignment in environment:
        command += ["-p", f"Environment={systemd_quote(assignment)}"]
    for path, ignore in environment_files:
        command += ["-p", f"EnvironmentFile={'-' if ignore else ''}{path}"]
    command += [python, "-c", PROBE, *argv]
    rc, out, err = run(command)
    if rc != 0:  # with --wait, systemd-run's exit code is the probe service's: say it, and what systemd said
        raise ReadingError(probe_failure(run, name, rc, err, environment_files))
    seen = json.loads(out.strip().splitlines()[-1])
    return {k: v for k, v in seen["env"].items() if k not in PER_RUN}, seen["argv"]


def load_warnings(run, unit, paths):
    """systemd's warnings about the unit's own files (`systemd-analyze verify` of the unit, which
    loads it as the manager does, drop-ins and templates included): lines naming one of `paths`
    with the line number, such as "Missing '=', ignoring line." or "EnvironmentFile= path is not
    absolute, ignoring"."""
    _, out, err = run(["systemd-analyze", "verify", "--man=no", unit])
    lines = [line.strip() for line in (out + err).splitlines()
             if any(line.startswith(f"{path}:") for path in paths) and "ignoring" in line.lower()]
    return list(dict.fromkeys(lines))


def exec_reading(run, unit):
    """What systemd loaded for a unit's service: ExecStart argv list, Environment, EnvironmentFiles."""
    starts = busctl(run, unit, "Service", "ExecStart")
    return {"exec_start": [[item[0], list(item[1]), bool(item[2])] for item in starts],
            "environment": list(busctl(run, unit, "Service", "Environment")),
            "environment_files": [[path, bool(ignore)] for path, ignore in
                                  busctl(run, unit, "Service", "EnvironmentFiles")]}


def unit_reading(run, unit, paths, python="/usr/bin/python3", probe_it=True):
    """systemd's reading of `unit` for adoption: exec_reading, its load warnings for `paths`
    (fragment and drop-ins), and - when probe_it - the environment a service with the unit's
    settings gets (env), the one a bare service gets (base_env: what the unit did not set), and
    ExecStart's argv after systemd's expansion."""
    out = exec_reading(run, unit)
    out["warnings"] = load_warnings(run, unit, paths)
    out["env"] = out["base_env"] = out["expanded_argv"] = None
    if probe_it and len(out["exec_start"]) == 1:
        out["base_env"], _ = probe(run, python, [], [], [])
        out["env"], argv = probe(run, python, out["environment"], out["environment_files"],
                                 out["exec_start"][0][1][1:])
        out["expanded_argv"] = [out["exec_start"][0][1][0], *argv]
    return out
