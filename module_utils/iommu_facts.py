"""Pure functions that read IOMMU groups, kernel flags and PCIe ACS from a sysfs tree.

Everything takes `root` (normally "/") so tests point it at a fixture tree. Nothing
here writes. Unreadable or malformed values become a named reason, never an exception.
"""

import os
import re

NVIDIA_VENDOR = "0x10de"
PCI_EXT_CAP_ID_ACS = 0x000D
ACS_CTRL_OFFSET = 6
ACS_FLAGS = (("SV", 0x01), ("TB", 0x02), ("RR", 0x04), ("CR", 0x08),
             ("UF", 0x10), ("EC", 0x20), ("DT", 0x40))
BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
CMDLINE_KEYS = ("iommu", "iommu.passthrough", "iommu.strict", "intel_iommu", "amd_iommu")
SECRET_ARG_RE = re.compile(r"(?i)\b([\w.-]*(?:token(?!s\b|s_|izer)|key|pass(?:word)?|secret)[\w.-]*)=(\S+)")


def read_text(path):
    """(value, None) or (None, reason)."""
    try:
        with open(path) as handle:
            return handle.read().strip(), None
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"


def parse_cmdline(text):
    """The IOMMU-relevant kernel flags; `passthrough` says what they imply, or None."""
    flags = {}
    for word in (text or "").split():
        key, sep, value = word.partition("=")
        if key in CMDLINE_KEYS:
            flags[key] = value if sep else True
    passthrough = None
    if flags.get("iommu") == "pt" or flags.get("iommu.passthrough") in ("1", "on", "y"):
        passthrough = True
    elif flags.get("iommu.passthrough") in ("0", "off", "n"):
        passthrough = False
    return {"flags": flags, "passthrough": passthrough,
            "strict": {"0": False, "1": True}.get(flags.get("iommu.strict"))}


def redact_cmdline(text):
    return SECRET_ARG_RE.sub(lambda m: f"{m.group(1)}=<redacted>", text or "")


def _group_key(name):
    return (not name.isdigit(), int(name) if name.isdigit() else 0, name)


def read_groups(root):
    """Every IOMMU group: [{id, type, devices}], and a reason when none are readable."""
    base = os.path.join(root, "sys/kernel/iommu_groups")
    try:
        names = os.listdir(base)
    except OSError as exc:
        return [], f"no IOMMU groups: cannot list {base}: {exc.strerror or exc}"
    groups = []
    for name in sorted(names, key=_group_key):
        group_type, reason = read_text(os.path.join(base, name, "type"))
        try:
            devices = sorted(os.listdir(os.path.join(base, name, "devices")))
        except OSError:
            devices = []
        groups.append({"id": name, "type": group_type if group_type is not None else "unknown",
                       "type_reason": reason, "devices": devices})
    if not groups:
        return [], f"no IOMMU groups in {base} (no IOMMU, or a VM guest without a virtual IOMMU)"
    return groups, None


def list_pci_devices(root):
    base = os.path.join(root, "sys/bus/pci/devices")
    devices = {}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return devices
    for bdf in names:
        path = os.path.join(base, bdf)
        vendor, _ = read_text(os.path.join(path, "vendor"))
        pci_class, _ = read_text(os.path.join(path, "class"))
        group_link = os.path.join(path, "iommu_group")
        group = os.path.basename(os.readlink(group_link)) if os.path.islink(group_link) else None
        devices[bdf] = {"vendor": vendor, "class": pci_class, "iommu_group": group}
    return devices


def is_gpu(device):
    """An NVIDIA display (0x0300) or 3D controller (0x0302)."""
    pci_class = device.get("class") or ""
    return device.get("vendor") == NVIDIA_VENDOR and pci_class[:6] in ("0x0300", "0x0302")


def upstream_bridges(root, bdf):
    """BDFs of the bridges above a device, nearest first, from its sysfs device path."""
    link = os.path.join(root, "sys/bus/pci/devices", bdf)
    try:
        real = os.path.realpath(link)
    except OSError:
        return []
    parts = [p for p in real.split(os.sep) if BDF_RE.match(p)]
    return list(reversed(parts[:-1])) if parts and parts[-1] == bdf else []


def find_ext_capability(config, cap_id):
    """Offset of a PCIe extended capability in config space bytes, or None."""
    offset, seen = 0x100, set()
    while offset and offset + 4 <= len(config) and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def decode_acs(control):
    flags = [name for name, bit in ACS_FLAGS if control & bit]
    return {"control": f"0x{control:04x}", "flags": flags,
            "redirects_p2p": bool(control & 0x04 or control & 0x08)}


def read_acs(root, bdf):
    """ACS control of one device: decoded flags, `absent`, or `unknown` with a reason."""
    path = os.path.join(root, "sys/bus/pci/devices", bdf, "config")
    try:
        with open(path, "rb") as handle:
            config = handle.read(4096)
    except OSError as exc:
        return {"bdf": bdf, "acs": "unknown", "reason": f"cannot read {path}: {exc.strerror or exc}"}
    if len(config) <= 0x100:
        return {"bdf": bdf, "acs": "unknown",
                "reason": f"extended config space not readable ({len(config)} bytes; needs root)"}
    offset = find_ext_capability(config, PCI_EXT_CAP_ID_ACS)
    if offset is None:
        return {"bdf": bdf, "acs": "absent"}
    if offset + ACS_CTRL_OFFSET + 2 > len(config):
        return {"bdf": bdf, "acs": "unknown", "reason": f"ACS capability at 0x{offset:x} truncated"}
    control = int.from_bytes(config[offset + ACS_CTRL_OFFSET:offset + ACS_CTRL_OFFSET + 2], "little")
    return {"bdf": bdf, "acs": "present", "offset": f"0x{offset:x}", **decode_acs(control)}


def collect(root="/"):
    """The IOMMU observation of a host rooted at `root`."""
    cmdline_text, cmdline_reason = read_text(os.path.join(root, "proc/cmdline"))
    cmdline = parse_cmdline(cmdline_text)
    groups, groups_reason = read_groups(root)
    by_id = {g["id"]: g for g in groups}
    devices = list_pci_devices(root)
    gpus = []
    for bdf, device in devices.items():
        if not is_gpu(device):
            continue
        group = by_id.get(device["iommu_group"])
        bridges = [read_acs(root, bridge) for bridge in upstream_bridges(root, bdf)]
        gpus.append({
            "bdf": bdf,
            "iommu_group": device["iommu_group"],
            "group_type": group["type"] if group else None,
            "translated": bool(group and group["type"] in ("DMA", "DMA-FQ")),
            "group_peers": [d for d in group["devices"] if d != bdf] if group else [],
            "upstream_bridges": bridges,
            "acs_redirects_p2p": any(b.get("redirects_p2p") for b in bridges),
            "acs_unknown": [b["bdf"] for b in bridges if b["acs"] == "unknown"],
        })
    reasons = [r for r in (cmdline_reason, groups_reason) if r]
    return {
        "enabled": bool(groups),
        "reasons": reasons,
        "cmdline": redact_cmdline(cmdline_text),
        "cmdline_flags": cmdline["flags"],
        "passthrough": cmdline["passthrough"],
        "strict": cmdline["strict"],
        "groups": groups,
        "gpus": gpus,
        "gpu_count": len(gpus),
        "translated_gpu_groups": sorted({g["iommu_group"] for g in gpus if g["translated"]}, key=_group_key),
        "acs_redirecting_bridges": sorted({b["bdf"] for g in gpus for b in g["upstream_bridges"]
                                           if b.get("redirects_p2p")}),
    }
