#!/usr/bin/env bash
# The verifiers check: verifiers (its `verifiers.v1` stack) pins openai<3 and mcp==2.0.0, which
# the [all] install does not hold, so it gets a virtual environment of its own with this project
# (the [verifiers] extra and the environments' extras) and the environment package verifiers'
# loader imports (integrations/verifiers/package, taskset id `agentenvs-verifiers`); then
# tests/integrations/test_verifiers.py runs verifiers' own `vf-eval` on every environment
# against an expert endpoint on 127.0.0.1, with skipping turned into failure. Nothing here
# touches the project's main .venv.
#
#   bash scripts/test_verifiers.sh              # venv in build/verifiers-venv (reused if present)
#   VERIFIERS_VENV=/tmp/v bash scripts/test_verifiers.sh
#   bash scripts/test_verifiers.sh -k TextCraft   # arguments go to pytest
#
# verifiers' chat harness runs as a `uv` script: uv is installed into the venv, and its first
# run fetches the script's packages (openai, mcp, httpx) into uv's cache.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VERIFIERS_VENV:-build/verifiers-venv}"
PYTHON="${PYTHON:-python3}"
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet -e ".[verifiers,babyai,webshop,alfworld]" uv \
    "pytest>=8" "pytest-timeout>=2.3"
"$VENV/bin/pip" install --quiet --no-deps -e integrations/verifiers/package
"$VENV/bin/pip" check
installed=$(date +%s)
echo "verifiers venv ready in $((installed - start)) s: $("$VENV/bin/pip" list 2>/dev/null \
    | grep -E '^(verifiers|openai|mcp) ' | tr -s ' ' | paste -sd ',' -)"
# the tests' conftests import torch, which this venv does not hold: the verifiers test uses none
PATH="$PWD/$VENV/bin:$PATH" AGENTENVS_REQUIRE_VERIFIERS=1 \
    "$VENV/bin/python" -m pytest tests/integrations/test_verifiers.py --noconftest \
    -q -rs -p no:cacheprovider --durations=0 "$@"
end=$(date +%s)
echo "verifiers tests ran in $((end - installed)) s (total $((end - start)) s)"
