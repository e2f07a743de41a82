#!/usr/bin/env bash
# The p2p A/B on real GPUs with the tensor-parallel GPU engine double, as one batch on the
# 2-GPU H200 machine: the double's TP math against a one-GPU reference (tests/gpu), then
# bench/gpu_ab.py (arms restarted per arm, cells, verdict, probe prediction, card), and raw
# all_reduce_perf output (checked and unchecked) as parser fixtures. Results land in $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8
out=${OUT:-/tmp/device-out}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# the project's own package (serving_rollout, its module_utils), beside the wheels
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade --target /tmp/site .
export PYTHONPATH=/tmp/site
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
nvidia-smi -L > "$out/hardware.txt"
start=$(date +%s%N)
python3 -m pytest -q -p no:cacheprovider tests/gpu > "$out/gpu-tests.log" 2>&1
echo "tests/gpu rc=$? wall_ms=$(ms $start)" | tee "$out/timings.txt"
start=$(date +%s%N)
python3 bench/gpu_ab.py --out /tmp/ab --requests "${GPU_AB_REQUESTS:-16}" > "$out/gpu-ab.json" 2> "$out/gpu-ab.log"
echo "gpu_ab rc=$? wall_ms=$(ms $start)" | tee -a "$out/timings.txt"
tar -C /tmp/ab -czf "$out/ab-run.tar.gz" .
mpi=/tmp/mpi-home; mkdir -p $mpi
ln -sfn "$(mpicc --showme:incdirs | awk '{print $1}')" $mpi/include
ln -sfn "$(mpicc --showme:libdirs | awk '{print $1}')" $mpi/lib
make -s -j16 -C .device/nccl-tests MPI=1 MPI_HOME=$mpi CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=/tmp/nccl-tests src.build > /tmp/build.log 2>&1
torch_nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))")
export LD_LIBRARY_PATH=${torch_nccl}:${LD_LIBRARY_PATH:-}
for p2p in 0 1; do
  NCCL_P2P_DISABLE=$p2p /tmp/nccl-tests/all_reduce_perf -b 8192 -e 33554432 -f 64 -d bfloat16 -g 2 -n 200 -w 20 -c 1 \
    > "$out/all_reduce_perf-p2p$((1 - p2p))-checked.txt" 2>&1
done
NCCL_P2P_DISABLE=0 /tmp/nccl-tests/all_reduce_perf -b 43008 -e 43008 -d bfloat16 -g 2 -n 100 -G 10 -c 0 \
  > "$out/all_reduce_perf-graph-unchecked.txt" 2>&1
cat "$out/timings.txt" "$out/gpu-tests.log"; tail -30 "$out/gpu-ab.log"; head -c 3000 "$out/gpu-ab.json"
