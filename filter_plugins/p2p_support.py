"""Filter: what the captured facts say about GPU peer-to-peer support (evidence, not proof)."""

from ansible.errors import AnsibleFilterError


def p2p_support_verdict(iommu, nvml):
    """Blockers and support evidence for P2P from the iommu_info and nvml_info results.

    Driver P2P status OK is support evidence, not proof: the verdict never says "proven".
    """
    if not isinstance(iommu, dict) or not isinstance(nvml, dict):
        raise AnsibleFilterError(
            f"p2p_support_verdict needs the iommu and nvml dicts, got {type(iommu).__name__} "
            f"and {type(nvml).__name__}")
    blockers, notes = [], []
    for gpu in iommu.get("gpus", []):
        if gpu.get("translated"):
            blockers.append(f"GPU {gpu['bdf']} is in IOMMU group {gpu['iommu_group']} with a translated "
                            f"{gpu['group_type']} domain: peer traffic goes through the IOMMU")
        for bridge in gpu.get("upstream_bridges", []):
            if bridge.get("redirects_p2p"):
                blockers.append(f"bridge {bridge['bdf']} above GPU {gpu['bdf']} has ACS "
                                f"{'/'.join(f for f in bridge['flags'] if f in ('RR', 'CR'))} set: "
                                "P2P is redirected to the root complex")
        if gpu.get("acs_unknown"):
            notes.append(f"ACS unknown on {', '.join(gpu['acs_unknown'])} above GPU {gpu['bdf']}")
    if not iommu.get("enabled"):
        reasons = list(dict.fromkeys(iommu.get("reasons", [])))  # each once
        notes.append("; ".join(reasons) if reasons and all(r.startswith("no IOMMU groups") for r in reasons)
                     else "no IOMMU groups: " + ("; ".join(reasons) or "none found"))
    if not nvml.get("available"):
        blockers.append(f"NVML not available: {nvml.get('reason')}")
    else:
        for pair in nvml.get("pairs", []):
            if not pair.get("p2p_ok"):
                blockers.append(f"NVML P2P READ/WRITE not OK for GPU {pair['i']} -> {pair['j']}: "
                                f"{pair['p2p_status']}")
    notes = list(dict.fromkeys(notes))
    if nvml.get("available") and nvml.get("gpu_count", len(nvml.get("gpus") or [None, None])) == 1:
        # one GPU has no peer: neither support nor a blocker, and no P2P control applies
        return {"driver_p2p_ok": None, "blockers": blockers, "support_evidence": False, "applies": False,
                "notes": notes + ["one GPU: no peer pair; P2P controls do not apply"],
                "proof": "not applicable: one GPU has no peer pair"}
    return {
        "applies": True,
        "driver_p2p_ok": bool(nvml.get("all_pairs_p2p_ok")),
        "blockers": blockers,
        "notes": notes,
        "support_evidence": not blockers,
        "proof": "not proven: driver P2P status is support evidence; run the peer-path check",
    }


class FilterModule:
    def filters(self):
        return {"p2p_support_verdict": p2p_support_verdict}
