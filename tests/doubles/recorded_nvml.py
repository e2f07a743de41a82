"""RecordedNvml: a TEST DOUBLE of the pynvml module that replays real NVML readings.

It answers the calls nvml_facts makes from a readings dict recorded on a real host
(tests/fixtures/h200x2-real), and behaves like the real binding where it matters: an
index that is not an int raises the TypeError ctypes raises (nvidia-ml-py's READ
constant is the tuple (0,)), and a reading recorded as an error raises NVMLError.
"""

from types import SimpleNamespace

P2P_INDEX_NAMES = {0: "READ", 1: "WRITE", 2: "NVLINK", 3: "ATOMICS", 4: "PCI"}
NVML_P2P_CAPS_INDEX_READ = (0,)  # as nvidia-ml-py 13.6xx defines it


class NVMLError(Exception):
    pass


class RecordedNvml:
    def __init__(self, readings, fail_init=None, missing=()):
        self.readings = readings
        self.fail_init = fail_init
        self.missing = set(missing)
        self.inits = 0
        self.shutdowns = 0

    def __getattribute__(self, name):
        if name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _value(self, value):
        if isinstance(value, dict) and "error" in value:
            raise NVMLError(value["error"])
        return value

    def nvmlInit(self):
        self.inits += 1
        if self.fail_init:
            raise NVMLError(self.fail_init)

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.readings["driver_version"]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.readings["cuda_driver_version"]

    def nvmlDeviceGetCount(self):
        return len(self.readings["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def _gpu(self, handle):
        return self.readings["gpus"][handle]

    def nvmlDeviceGetName(self, h):
        return self._gpu(h)["name"].encode()

    def nvmlDeviceGetUUID(self, h):
        return self._gpu(h)["uuid"]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._gpu(h)["bus_id"].encode())

    @property
    def nvmlMemory_v2(self):
        """The versioned call's constant, as nvidia-ml-py 12+ defines it."""
        return 0x02000028

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        """The first call, or with `version` the versioned one: replayed where the readings recorded it
        (memory_reserved), else NVMLError as a driver without nvmlDeviceGetMemoryInfo_v2 answers."""
        gpu = self._gpu(h)
        if version is None:
            used = gpu["memory_used"] + (gpu.get("memory_reserved") or 0) if gpu.get("memory_call") == "v2" \
                else gpu["memory_used"]
            return SimpleNamespace(total=gpu["memory_total"], used=used, free=gpu["memory_total"] - used)
        if gpu.get("memory_call") != "v2":
            raise NVMLError("Function Not Found")
        return SimpleNamespace(total=gpu["memory_total"], used=gpu["memory_used"], reserved=gpu["memory_reserved"],
                               free=gpu["memory_total"] - gpu["memory_used"] - gpu["memory_reserved"])

    def nvmlDeviceGetNvLinkState(self, h, link):
        links = {entry["link"]: entry for entry in self._gpu(h)["nvlinks"]}
        if link not in links:
            raise NVMLError("Not Supported")
        return int(links[link]["active"])

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        entry = next(e for e in self._gpu(h)["nvlinks"] if e["link"] == link)
        return SimpleNamespace(busId=entry["remote_bus_id"])

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_memory"])
                for p in self._gpu(h)["processes"]]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._value(self._gpu(h)["power"]["enforced_mw"])

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._value(self._gpu(h)["power"]["limit_mw"])

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._value(self._gpu(h)["power"]["default_mw"])

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return self._value(self._gpu(h)["power"]["constraints_mw"])

    def nvmlDeviceGetPowerUsage(self, h):
        return self._value(self._gpu(h)["power"]["usage_mw"])

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._gpu(h)["clocks"]["sm_mhz" if clock == 1 else "mem_mhz"]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return self._gpu(h)["clocks"]["sm_max_mhz" if clock == 1 else "mem_max_mhz"]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._value(self._gpu(h)["temperature_c"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._value(self._gpu(h)["clock_event_reasons"])

    def _pair(self, a, b):
        return next(p for p in self.readings["pairs"] if p["i"] == a and p["j"] == b)

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        if not isinstance(index, int):
            raise TypeError("argument 3: TypeError: Don't know how to convert parameter 3")
        return self._value(self._pair(a, b)["p2p"][P2P_INDEX_NAMES[index]])

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self._value(self._pair(a, b)["common_ancestor"])
