"""Filter: the ten preflight checks, each with observed, expected and a verdict."""

from ansible.errors import AnsibleFilterError

REQUIRED_FACTS = ("unit", "health_status", "server_info", "recipe", "nvml", "journal", "gpu_processes")


def _record(check, observed, expected, ok, skipped_reason=None):
    verdict = "skipped" if skipped_reason else ("pass" if ok else "fail")
    record = {"check": check, "observed": observed, "expected": expected, "verdict": verdict}
    if skipped_reason:
        record["reason"] = skipped_reason
    return record


def _pinned(expected, key):
    value = expected.get(key)
    return None if value in (None, "") else value


def preflight_checks(facts, expected, require_nvml=True):
    """Ten named checks of a serving host before any change.

    facts: unit (systemctl show status), health_status (HTTP code), server_info (engine's
    /server_info), recipe (serving_recipe), nvml (nvml_info), journal (journal_scan),
    gpu_processes (gpu_free, each with its systemd unit), container_id (optional: the unit's
    container, whose scope holds its processes). expected: the inventory's pins.
    """
    if not isinstance(facts, dict) or any(k not in facts for k in REQUIRED_FACTS):
        missing = [k for k in REQUIRED_FACTS if not isinstance(facts, dict) or k not in facts]
        raise AnsibleFilterError(f"preflight_checks needs facts {list(REQUIRED_FACTS)}; missing {missing}")
    if not isinstance(expected, dict):
        raise AnsibleFilterError(f"preflight_checks needs the expected pins as a dict, got {expected!r}")
    unit, info, recipe, nvml = facts["unit"], facts["server_info"] or {}, facts["recipe"], facts["nvml"]
    nvml_ok = bool(nvml.get("available"))
    no_nvml = None if nvml_ok else f"NVML not available ({nvml.get('reason')})"
    checks = []

    state = {"ActiveState": unit.get("ActiveState"), "UnitFileState": unit.get("UnitFileState")}
    checks.append(_record("unit active and enabled", state, {"ActiveState": "active", "UnitFileState": "enabled"},
                          state == {"ActiveState": "active", "UnitFileState": "enabled"}))
    checks.append(_record("health OK", facts["health_status"], 200, facts["health_status"] == 200))

    model = {"model": info.get("model_path", recipe.get("model")),
             "revision": info.get("revision", recipe.get("revision"))}
    want = {"model": _pinned(expected, "model"), "revision": _pinned(expected, "model_revision")}
    checks.append(_record("model and revision as pinned", model, want,
                          all(want[k] is None or str(model[k]) == str(want[k]) for k in want)))

    for check, key, pin in (("TP size", "tp_size", "tp_size"), ("context length", "context_length", "context_length")):
        observed = info.get(key, recipe.get(key))
        pinned = _pinned(expected, pin)
        checks.append(_record(check, observed, pinned, pinned is None or str(observed) == str(pinned)))

    gpu_count = nvml.get("gpu_count") if nvml_ok else None
    observed = {"gpu_set": recipe.get("gpus"), "gpu_count": gpu_count}
    if nvml_ok:  # what the result card names as the hardware
        observed["gpu_models"] = sorted({str(g.get("name")) for g in nvml.get("gpus", [])})
        observed["active_nvlinks"] = sorted({g.get("active_nvlinks") for g in nvml.get("gpus", [])
                                             if g.get("active_nvlinks") is not None})
    want = {"gpu_set": _pinned(expected, "gpus"), "gpu_count": _pinned(expected, "gpu_count")}
    ok = (want["gpu_set"] is None or str(observed["gpu_set"]) == str(want["gpu_set"])) and \
        (want["gpu_count"] is None or gpu_count == int(want["gpu_count"]))
    skip = no_nvml if (not nvml_ok and want["gpu_count"] is not None and not require_nvml) else None
    if not nvml_ok and want["gpu_count"] is not None and require_nvml:
        ok = False
    checks.append(_record("GPU set and count", observed, want, ok, skip))

    limit = _pinned(expected, "power_limit_w")
    if nvml_ok:
        gpus = nvml.get("gpus", [])
        observed = [{"index": g["index"], "enforced_w": g["power_w"]["enforced"],
                     "events": g["power_or_thermal_events"]} for g in gpus]
        ok = all((limit is None or g["enforced_w"] == float(limit)) and not g["events"] for g in observed)
        checks.append(_record("power limits as pinned, no power or thermal clock events", observed,
                              {"enforced_w": limit, "events": []}, ok))
    else:
        checks.append(_record("power limits as pinned, no power or thermal clock events", None,
                              {"enforced_w": limit, "events": []}, False, None if require_nvml else no_nvml))

    versions = (facts["journal"].get("nccl") or {}).get("versions") or []
    pinned = _pinned(expected, "nccl_version")
    if pinned is None:
        checks.append(_record("NCCL version as pinned (from the engine's log)", versions, None, True,
                              None if versions else "no NCCL version pinned and none in the engine's log"))
    else:
        checks.append(_record("NCCL version as pinned (from the engine's log)", versions, pinned,
                              versions == [str(pinned)]))

    unit_name = unit.get("Id") or unit.get("Names")
    # A container's processes run in the runtime's scope (libpod-<id>.scope, docker-<id>.scope),
    # outside the unit's cgroup: they are the unit's own when the scope names its container.
    own_scopes = [s for s in (recipe.get("container_name"), facts.get("container_id")) if s]
    foreign = [p for p in facts["gpu_processes"]
               if p.get("unit") != unit_name and not any(s in str(p.get("unit", "")) for s in own_scopes)]
    checks.append(_record("no foreign compute processes on the GPUs", foreign, [], not foreign))

    # The original's own warnings are its baseline (the candidate is judged against them); only a
    # crash signature says the original is not healthy now.
    journal = facts["journal"]
    observed = {"crash": journal.get("cause") if journal.get("crashed") else None,
                "warnings (baseline noise)": journal.get("warnings") or []}
    checks.append(_record("no crash in the current invocation's journal", observed,
                          {"crash": None}, not journal.get("crashed")))
    return checks


class FilterModule:
    def filters(self):
        return {"preflight_checks": preflight_checks}
