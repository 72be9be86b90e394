# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The constraints file pins torch to the CPU wheel on disk: nothing may pull a CUDA build.
PIP_INSTALL := $(PIP) install --constraint constraints.txt
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

.PHONY: demo test bench install clean

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

test: install
	$(PY) -m pytest -q

bench: install
	$(PIP_INSTALL) -e '.[bench]'
	$(PY) benchmarks/sampling.py

clean:
	rm -rf $(VENV) build *.egg-info
