# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The constraints file pins torch to the CPU wheel on disk: nothing may pull a CUDA build.
PIP_INSTALL := $(PIP) install --constraint constraints.txt
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

# Benchmarks compare with TorchRL, which pins its own tensordict: they get a venv of their own.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

.PHONY: demo examples test test-faults test-ray test-torchrl bench bench-install install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

demo: install
	$(PY) examples/demo.py

# Ported training loops (replay-buffer code of TorchRL scripts on the local gym data, no network; < 1 min).
examples: install
	$(PY) examples/sac_ndim2.py

test: install
	$(PY) -m pytest -q -m "not ray and not slow"

# Fault injection: seeded kill -9 trials, concurrent loaders, rm while sampling (~2-3 min).
test-faults: install
	$(PY) -m pytest -q tests/faults -m slow

# Ray installs in ~20 s and ray.init takes ~10-20 s on 2 cores: its tests have a target of their own.
test-ray: install
	$(PIP_INSTALL) -e '.[test,ray]'
	$(PY) -m pytest -q -m ray

# TorchRL pins its own tensordict: the interop tests run in the benchmark venv.
test-torchrl: bench-install
	$(BENCH_PY) -m pytest -q tests/test_torchrl_interop.py

$(BENCH_PY):
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --upgrade pip

$(BENCH_STAMP): $(BENCH_PY) pyproject.toml constraints.txt
	$(BENCH_PY) -m pip install --constraint constraints.txt torch==2.13.0
	$(BENCH_PY) -m pip install --constraint constraints.txt -e '.[bench]'
	rm -f $(BENCH_VENV)/.installed-* && touch $@

bench-install: $(BENCH_STAMP)

# Each script prints a table and writes JSON under benchmarks/results/.
bench: bench-install
	$(BENCH_PY) benchmarks/sampling.py
	$(BENCH_PY) benchmarks/build.py
	$(BENCH_PY) benchmarks/images.py
	$(BENCH_PY) benchmarks/replay_features.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) build *.egg-info
