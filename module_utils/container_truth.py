"""A container as its runtime runs it (`docker inspect` / `podman inspect`), and the proof that a
candidate's container differs from the original's in exactly the one control.

systemd's reading proves the unit; only the runtime knows what the container finally got: the
`--env-file` contents (which systemd never reads), the image's ENV, containers.conf defaults, the
image the tag resolved to, mounts and shm. The reading keeps what decides the engine's behaviour
and drops the container's identity (id, name, created, state, paths under the runtime's storage,
hostname, podman's PODMAN_SYSTEMD_UNIT label, the raw create command). Values off the allow-list
are HMAC digests under a key the caller holds for the run, so two readings compare and no secret
leaves the host. Pure functions; the container_reading module runs the runtime.
"""

from .unit_oracle import _edit_explained, digested_values, keyed_digest, word_edits
from .unit_recipe import REDACTED, redact_argv

# HostConfig keys that name this container or its files, not what it runs with.
HOST_IDENTITY = {"LogConfig", "ContainerIDFile", "ConsoleSize"}
LABEL_IDENTITY = {"PODMAN_SYSTEMD_UNIT"}


def digest_argv(argv, key):
    """An argv as redact_argv shows it, with each redacted value replaced by its digest (so two
    argvs compare word for word and a changed secret is seen as changed, never shown)."""
    shown = redact_argv(argv)
    return [s.replace(REDACTED, keyed_digest(key, raw)) if REDACTED in s else s
            for s, raw in zip(shown, argv, strict=True)]


def view(inspect, key):
    """The parts of one `inspect` object that decide what the engine runs with."""
    config = inspect.get("Config") or {}
    env = dict(e.split("=", 1) if "=" in e else (e, "") for e in config.get("Env") or [])
    env.pop("HOSTNAME", None)  # the container's own name or id
    labels = {k: v for k, v in (config.get("Labels") or {}).items() if k not in LABEL_IDENTITY}
    mounts = sorted([m.get("Type"), m.get("Source"), m.get("Destination"), bool(m.get("RW"))]
                    for m in inspect.get("Mounts") or [])
    host = {k: v for k, v in (inspect.get("HostConfig") or {}).items() if k not in HOST_IDENTITY}
    return {"image": inspect.get("ImageDigest") or inspect.get("Image"), "image_id": inspect.get("Image"),
            "env": digested_values(env, key), "labels": digested_values(labels, key),
            "entrypoint": digest_argv(_words(config.get("Entrypoint")), key),
            "cmd": digest_argv(_words(config.get("Cmd")), key),
            "user": config.get("User"), "workdir": config.get("WorkingDir"), "stop_signal": config.get("StopSignal"),
            "mounts": mounts, "host": {k: host[k] for k in sorted(host)}}


def _words(value):
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def differences(original, candidate):
    """[{what, before, after, edits?}] between two views (values already allow-listed or digests)."""
    out = []
    for name in ("image", "image_id", "user", "workdir", "stop_signal", "mounts", "entrypoint"):
        if original.get(name) != candidate.get(name):
            out.append({"what": name, "before": original.get(name), "after": candidate.get(name)})
    if original["cmd"] != candidate["cmd"]:
        out.append({"what": "cmd", "before": original["cmd"], "after": candidate["cmd"],
                    "edits": word_edits(original["cmd"], candidate["cmd"])})
    for group in ("env", "labels", "host"):
        a, b = original.get(group) or {}, candidate.get(group) or {}
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                out.append({"what": f"{group} {name}", "before": a.get(name), "after": b.get(name)})
    return out


def proof(original, candidate, change, image_env=None):
    """{ok, control, seen, unexplained}: the two containers differ in the one control and in nothing
    else (an env control in Env; an arg or speculative control in the command's words)."""
    kind, name = change.get("kind"), change.get("name") or ""
    diffs = differences(original, candidate)
    explained, seen = [], False
    for diff in diffs:
        if kind == "image" and diff["what"] in ("image", "image_id"):
            explained.append(diff)
            seen = True
        elif kind == "image" and diff["what"].startswith("env ") and diff["what"][4:] in (image_env or {}):
            explained.append(diff)  # the new image's own ENV (its engine, NCCL and CUDA versions): the image's
        elif kind == "env" and diff["what"] == f"env {name}":
            explained.append(diff)
            seen = True
        elif diff["what"] == "cmd" and kind in ("arg", "speculative"):
            sides = {"before": diff["before"], "after": diff["after"]}
            if all(_edit_explained(e, sides[e["side"]], change, None) for e in diff["edits"]):
                explained.append(diff)
                seen = True
    unexplained = [{k: v for k, v in d.items() if k != "edits"} for d in diffs if d not in explained]
    return {"ok": seen and not unexplained, "control": f"{kind} {name}".strip(), "seen": seen,
            "unexplained": unexplained}


# What the restoration proof asks the runtime of the restored container (docker and podman alike).
IDENTITY_FORMAT = "{{.Name}} {{.Image}} {{.Config.Image}}"


def inspect_identity_argv(runtime, container):
    """The proof's inspect command: one line, 'name image-id image-ref', which identity_problems reads."""
    return [runtime, "inspect", "--format", IDENTITY_FORMAT, container]


def identity_problems(inspect_line, container, image):
    """What is wrong with a restored container's identity.
    inspect_line: `{{.Name}} {{.Image}} {{.Config.Image}}` as docker or podman prints it
    (docker's name has a leading '/'); image: the original recipe's image reference. [] when the
    container has the expected name and runs that image: the same digest when the recipe pins
    one, else the same reference (podman may prefix the registry). Otherwise each problem."""
    if not isinstance(inspect_line, str) or len(inspect_line.split()) != 3:
        raise ValueError(f"identity_problems needs 'name image-id image-ref', got {inspect_line!r}")
    if not container or not image:
        raise ValueError(f"identity_problems needs a container name and an image, "
                         f"got {container!r} and {image!r}")
    name, image_id, reference = inspect_line.split()
    problems = []
    if name.lstrip("/") != container:
        problems.append(f"container is named {name.lstrip('/')}, expected {container}")
    if "@sha256:" in image:
        same = reference.endswith("@" + image.split("@", 1)[1])
    else:
        same = reference == image or reference.endswith("/" + image)
    if not same:
        problems.append(f"container runs {reference} (image {image_id}), expected {image}")
    return problems
