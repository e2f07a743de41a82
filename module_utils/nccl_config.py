"""The effective NCCL configuration of a serving unit: every source NCCL and the engine read,
in precedence order, and the value each gives each NCCL_* variable.

Precedence, highest first (facts from NCCL's param.cc and CPython's site module):
  python-hook     an unconditional os.environ[...] = / update / putenv in sitecustomize.py,
                  usercustomize.py or an executed `import` line of a *.pth file of the serving
                  interpreter: runs at interpreter start, after the environment is set, so it wins
  process-env     the environment the engine starts with: the unit's Environment= and
                  EnvironmentFile= (a process unit) or `-e`/`--env-file` (a container)
  image-env       the container image's ENV (below -e and --env-file)
  python-default  os.environ.setdefault(...) in a start-up hook: only where nothing above set it
  nccl-conf-user  NCCL_CONF_FILE if set, else ~/.nccl.conf of the service user: NCCL loads it
                  with setenv(..., overwrite=0), so any environment value wins over it
  nccl-conf-system  /etc/nccl.conf, loaded last, also without overwriting
Only NCCL_* names are kept: their values are known non-secret controls.
Pure functions; the serving_recipe module does the reading.
"""

import ast
import json
import re

PRECEDENCE = ("python-hook", "process-env", "image-env", "python-default", "nccl-conf-user", "nccl-conf-system")
NCCL_NAME_RE = re.compile(r"^NCCL_[A-Z0-9_]+$")
# What NCCL does when a variable is unset, for the controls a candidate changes.
NCCL_DEFAULTS = {"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0", "NCCL_IGNORE_DISABLED_P2P": "0"}
COMPUTED = "<computed at run time>"

# Run by the serving interpreter with -I -S: finds its start-up hooks without running them.
# Python imports only the first sitecustomize and usercustomize on its path; every *.pth runs.
HOOK_PROBE = (
    "import glob,json,os,site,sys\n"
    "dirs=list(dict.fromkeys([p for p in sys.path if os.path.isdir(p)]+site.getsitepackages()+sys.argv[1:]))\n"
    "out={}\n"
    "for name in ('sitecustomize.py','usercustomize.py'):\n"
    "  for d in dirs:\n"
    "    p=d+'/'+name\n"
    "    if os.path.isfile(p): out[os.path.realpath(p)]=open(p,errors='replace').read(); break\n"
    "for d in dirs:\n"
    "  for p in sorted(glob.glob(d+'/*.pth')): out[os.path.realpath(p)]=open(p,errors='replace').read()\n"
    "print(json.dumps({'dirs':dirs,'version':'%d.%d'%sys.version_info[:2],'files':out}))\n"
)


def nccl_only(env):
    """The NCCL_* entries of an environment mapping (nothing else is ever kept)."""
    return {k: str(v) for k, v in (env or {}).items() if NCCL_NAME_RE.match(str(k))}


def parse_environ_blob(data):
    """/proc/<pid>/environ bytes -> its NCCL_* variables."""
    env = {}
    for item in (data or b"").split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep:
            env[key] = value
    return nccl_only(env)


def parse_nccl_conf(text):
    """NAME=VALUE lines as NCCL's setEnvFile reads them (# comments, blank lines skipped)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return nccl_only(out)


def _literal(node):
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return COMPUTED
    return str(value)


def _is_environ(node):
    """os.environ, or a bare `environ` (from os import environ)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id == "environ")


def hook_assignments(source):
    """[(name, value, mode)] of NCCL_* variables a Python start-up hook sets; mode 'set'
    (unconditional: os.environ[...] =, update, putenv, __setitem__) or 'default' (setdefault).
    Values that are not literals read COMPUTED."""
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _is_environ(target.value):
                    found.append((_literal(target.slice), _literal(node.value), "set"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            args = node.args
            if method in ("setdefault", "__setitem__") and _is_environ(owner) and len(args) == 2:
                found.append((_literal(args[0]), _literal(args[1]), "default" if method == "setdefault" else "set"))
            elif method == "putenv" and len(args) == 2:
                found.append((_literal(args[0]), _literal(args[1]), "set"))
            elif method == "update" and _is_environ(owner):
                if args and isinstance(args[0], ast.Dict):
                    pairs = zip(args[0].keys, args[0].values, strict=True)
                    found += [(_literal(k), _literal(v), "set") for k, v in pairs if k]
                found += [(kw.arg, _literal(kw.value), "set") for kw in node.keywords if kw.arg]
    return [(name, value, mode) for name, value, mode in found if NCCL_NAME_RE.match(name)]


def pth_code(text):
    """The lines of a .pth file the site module executes (those starting with 'import')."""
    return "\n".join(line for line in (text or "").splitlines() if line.startswith(("import ", "import\t")))


def hook_sources(files):
    """{path: text} of start-up hooks -> sources (python-hook and python-default)."""
    sources = []
    for path in sorted(files):
        code = pth_code(files[path]) if path.endswith(".pth") else files[path]
        assignments = hook_assignments(code)
        for mode, kind in (("set", "python-hook"), ("default", "python-default")):
            values = {name: value for name, value, m in assignments if m == mode}
            if values:
                sources.append({"source": kind, "path": path, "values": values})
    return sources


def effective(sources):
    """Per NCCL_* variable: the value that wins, its source and path, and what it overrides.

    sources: [{source: one of PRECEDENCE, path, values: {NAME: value}}]; within one kind the
    earlier entry wins (a hook run later than another is listed first by the caller).
    """
    order = {kind: i for i, kind in enumerate(PRECEDENCE)}
    unknown = [s["source"] for s in sources if s["source"] not in order]
    if unknown:
        raise ValueError(f"unknown NCCL configuration source(s): {unknown}")
    ranked = sorted(sources, key=lambda s: order[s["source"]])
    out = {}
    for src in ranked:
        for name, value in sorted(src["values"].items()):
            entry = {"source": src["source"], "path": src.get("path"), "value": value}
            if name not in out:
                out[name] = {**entry, "overrides": []}
            else:
                out[name]["overrides"].append(entry)
    return out


def value_of(config, name):
    """The effective value of a variable, NCCL's default where no source sets it."""
    return config[name]["value"] if name in config else NCCL_DEFAULTS.get(name)


def change_problem(sources, name, new_value):
    """Why a candidate that sets `name` to new_value (None: drops it) in the unit's environment
    would not change what NCCL reads, or None when it would. Names the deciding source."""
    if not NCCL_NAME_RE.match(str(name)):
        return None
    before = effective(sources)
    hooks = [s for s in sources if s["source"] == "python-hook" and name in s["values"]]
    if hooks:
        return (f"{name} is set by a Python start-up hook of the serving interpreter "
                f"({hooks[0]['path']}: {name}={hooks[0]['values'][name]}), which overrides the unit's "
                f"environment; the candidate would change nothing")
    candidate = [dict(s) for s in sources if s["source"] != "process-env"]
    process = {k: v for s in sources if s["source"] == "process-env" for k, v in s["values"].items()}
    if new_value is None:
        process.pop(name, None)
    else:
        process[name] = str(new_value)
    candidate.append({"source": "process-env", "path": "candidate unit", "values": process})
    after = effective(candidate)
    old, new = value_of(before, name), value_of(after, name)
    if old == new:
        def where(config):
            return f"{config[name]['source']} {config[name]['path']}" if name in config else "NCCL's default"
        return (f"the candidate does not change the effective {name}: {old!r} before (from {where(before)}), "
                f"{new!r} after (from {where(after)}); an A/B of two identical configurations spends GPU "
                f"time for nothing")
    return None


# ---- reading a host (I/O kept here, behind small seams, so fixture roots can stand in) ----

PYTHON_RE = re.compile(r"(^|/)python[0-9.]*$")


def serving_interpreter(argv, read_text):
    """The Python interpreter that runs the engine: argv[0] when it is python, else the
    interpreter in argv[0]'s shebang (console scripts such as vllm or a venv's sglang)."""
    if not argv:
        return None
    if PYTHON_RE.search(argv[0]):
        return argv[0]
    first = (read_text(argv[0]) or "").split("\n", 1)[0]
    if first.startswith("#!"):
        words = first[2:].split()
        if words and words[0].endswith("/env") and len(words) > 1:
            words = words[1:]
        if words and PYTHON_RE.search(words[0]):
            return words[0]
    return None


def read_sources(recipe, service_home, read_text, run):
    """Every NCCL configuration source of a parsed unit, highest precedence first, and notes.

    read_text(path) -> str or None; run(argv) -> (rc, stdout, stderr). A container's env
    (recipe["env"]) is its --env-file files with -e over them, as parse_recipe reads them.
    """
    sources, notes = [], []
    process_env = {}
    if recipe["runtime"] == "process":
        process_env = nccl_only(recipe["env"])
        path = "unit Environment=/EnvironmentFile="
    else:
        process_env = nccl_only(recipe["env"])
        path = f"{recipe['runtime']} run -e/--env-file"
    interpreter = None
    if recipe["runtime"] == "process":
        interpreter = serving_interpreter(recipe["engine_command"] or recipe["argv"], read_text)
        if interpreter:
            user_site = f"{service_home}/.local/lib" if service_home else None
            rc, out, err = run([interpreter, "-I", "-S", "-c", HOOK_PROBE] + ([user_site] if user_site else []))
            if rc == 0:
                probe = json.loads(out)
                if user_site:
                    probe["files"].update(_user_site_files(service_home, probe["version"], read_text))
                sources += hook_sources(probe["files"])
                notes.append(f"start-up hooks of {interpreter} searched in {len(probe['dirs'])} directories")
            else:
                notes.append(f"could not list the start-up hooks of {interpreter}: {err.strip()[:200]}")
        else:
            notes.append("the engine's interpreter is not python or a python script: start-up hooks not searched")
    else:
        image = recipe.get("image")
        rc, out, err = run([recipe["runtime"], "image", "inspect", "--format", "{{json .Config.Env}}", image])
        if rc == 0:
            env = dict(item.partition("=")[::2] for item in (json.loads(out or "null") or []))
            sources.append({"source": "image-env", "path": f"image {image}", "values": nccl_only(env)})
        else:
            notes.append(f"could not inspect image {image}: {err.strip()[:200]}")
        notes.append("host /etc/nccl.conf and ~/.nccl.conf are not visible inside the container")
    sources.append({"source": "process-env", "path": path, "values": process_env})
    if recipe["runtime"] == "process":
        conf_file = process_env.get("NCCL_CONF_FILE")
        user_conf = conf_file or (f"{service_home}/.nccl.conf" if service_home else None)
        if user_conf:
            text = read_text(user_conf)
            if text is not None:
                sources.append({"source": "nccl-conf-user", "path": user_conf, "values": parse_nccl_conf(text)})
        text = read_text("/etc/nccl.conf")
        if text is not None:
            sources.append({"source": "nccl-conf-system", "path": "/etc/nccl.conf", "values": parse_nccl_conf(text)})
    return sources, notes


def _user_site_files(home, version, read_text):
    """A service user's usercustomize.py (the probe runs as root, so it cannot see the user's site)."""
    base = f"{home}/.local/lib/python{version}/site-packages"
    found = {}
    for name in ("usercustomize.py", "sitecustomize.py"):
        text = read_text(f"{base}/{name}")
        if text is not None:
            found[f"{base}/{name}"] = text
    return found


def running_environment(main_pid, read_bytes, children):
    """NCCL_* of the running main process and each of its descendants: the ground truth of what
    the original started with. children(pid) -> [pid]. Workers that differ from the main
    process had a value set at run time (by the engine or a hook) before they were spawned."""
    if not main_pid or str(main_pid) == "0":
        return None
    main = parse_environ_blob(read_bytes(f"/proc/{main_pid}/environ"))
    workers, queue, seen = {}, list(children(main_pid)), set()
    while queue:
        pid = queue.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        env = parse_environ_blob(read_bytes(f"/proc/{pid}/environ"))
        if env != main:
            workers[str(pid)] = env
        queue += children(pid)
    return {"main_pid": int(main_pid), "main": main, "workers_differing": workers}


def summary(sources, running=None):
    """The document the recipe carries: sources, the effective value of each variable and,
    where the process runs, where its environment differs from what the unit declares."""
    config = effective(sources)
    drift = []
    if running:
        declared = {k: v for s in sources if s["source"] in ("process-env", "image-env") for k, v in
                    s["values"].items()}
        for name in sorted(set(declared) | set(running["main"])):
            if declared.get(name) != running["main"].get(name):
                drift.append({"name": name, "declared": declared.get(name), "running": running["main"].get(name)})
    return {"precedence": list(PRECEDENCE), "sources": sources, "effective": config, "running": running,
            "drift": drift}
