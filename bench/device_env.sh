# Sourced by the device scripts (bench/device_*.sh): the safe NCCL settings of the device machine, $out and $py,
# and the carried wheels (.whl: ansible-core and what it needs) with this checkout's package installed beside them.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 ANSIBLE_FORCE_COLOR=0
out=${OUT:-/tmp/device-out}; mkdir -p "$out"
py=$(command -v python3)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# the project's own package (serving_rollout, its module_utils), beside the wheels
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade --target /tmp/site .
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH LC_ALL=C.UTF-8 LANG=C.UTF-8
export out py
