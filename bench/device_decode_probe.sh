#!/usr/bin/env bash
# Real-GPU run of the decode-size probe on the 2-GPU H200 machine, as one batch: build NVIDIA
# nccl-tests (a snapshot carried in .device/nccl-tests, outside the repo's tracked files),
# run bench_decode_probe.py (probe, eager loop and all_reduce_perf side by side, bracketed),
# then peer-path.yml with and without the nccl-tests cross-check, timed. Results land in $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 ANSIBLE_FORCE_COLOR=0 LC_ALL=C.UTF-8 LANG=C.UTF-8
out=${OUT:-/tmp/device-out}; mkdir -p "$out"
py=$(command -v python3)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# the project's own package (serving_rollout, its module_utils), beside the wheels
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade --target /tmp/site .
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
nvidia-smi topo -m > "$out/topology.txt" 2>&1

# nccl-tests against the host's nccl.h, with MPI so it can run one process per GPU.
mpi=/tmp/mpi-home; mkdir -p $mpi
ln -sfn "$(mpicc --showme:incdirs | awk '{print $1}')" $mpi/include
ln -sfn "$(mpicc --showme:libdirs | awk '{print $1}')" $mpi/lib
start=$(date +%s%N)
make -s -j16 -C .device/nccl-tests MPI=1 MPI_HOME=$mpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=/tmp/nccl-tests src.build > /tmp/build.log 2>&1
echo "nccl-tests build rc=$? wall_ms=$(ms $start)" | tee "$out/timings.txt"
tail -5 /tmp/build.log
binary=/tmp/nccl-tests/all_reduce_perf
# The NCCL torch loads (2.28.9), for nccl-tests too, so both sides run the same library.
torch_nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=${torch_nccl}:${LD_LIBRARY_PATH:-}
echo "torch NCCL lib: $torch_nccl" | tee -a "$out/timings.txt"

start=$(date +%s%N)
python3 bench/bench_decode_probe.py --nccl-tests $binary --rounds 3 > "$out/decode-probe.json" 2> "$out/decode-probe.log"
echo "bench_decode_probe rc=$? wall_ms=$(ms $start)" | tee -a "$out/timings.txt"

common=(-i localhost, -c local -e "ansible_python_interpreter=$py" -e peer_path_hosts=localhost -e "peer_path_python=$py")
start=$(date +%s%N)
ansible-playbook "${common[@]}" playbooks/peer-path.yml -e observation_writer_dir=/tmp/ev-plain \
  -e peer_path_nccl_tests= > /tmp/peer-path-plain.log 2>&1
echo "peer-path.yml (probe only) rc=$? wall_ms=$(ms $start)" | tee -a "$out/timings.txt"
start=$(date +%s%N)
ansible-playbook "${common[@]}" playbooks/peer-path.yml -e observation_writer_dir=/tmp/ev-cross \
  -e peer_path_nccl_tests=$binary > /tmp/peer-path-cross.log 2>&1
echo "peer-path.yml (with nccl-tests cross-check) rc=$? wall_ms=$(ms $start)" | tee -a "$out/timings.txt"
tail -4 /tmp/peer-path-plain.log /tmp/peer-path-cross.log
cp /tmp/ev-plain/localhost/*/peer-path-observation.json "$out/peer-path-observation.json" 2>/dev/null
cp /tmp/ev-cross/localhost/*/peer-path-observation.json "$out/peer-path-cross-observation.json" 2>/dev/null
tar -czf "$out/logs.tar.gz" /tmp/peer-path-plain.log /tmp/peer-path-cross.log /tmp/build.log 2>/dev/null
cat "$out/timings.txt"; python3 -c "
import json; d=json.load(open('$out/decode-probe.json')); print(json.dumps(d['summary'], indent=1)); print(d['checks'])"
