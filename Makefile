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

# Upstream's own writers/readers (TensorFlow, TFDS, Dopamine, ...) live in a venv of their own:
# tests/upstream/requirements*.txt list them; our package is installed into it too.
UPSTREAM_VENV := .venv-upstream
UPSTREAM_PY := $(UPSTREAM_VENV)/bin/python
UPSTREAM_REQS := tests/upstream/requirements.txt tests/upstream/requirements-nodeps.txt tests/upstream/requirements-sdist.txt
# OGBench's training code (impls/, with GCDataset/HGCDataset) is not in its wheel but is in its PyPI sdist:
# the sdist is fetched by pip at install time (hash-pinned) and impls/ unpacked into the venv, never at test time.
OGBENCH_IMPLS := $(UPSTREAM_VENV)/ogbench-impls
UPSTREAM_STAMP := $(UPSTREAM_VENV)/.installed-$(shell cat pyproject.toml constraints.txt $(UPSTREAM_REQS) | cksum | cut -d' ' -f1)

.PHONY: demo examples test test-install test-upstream upstream-install test-upstream-lerobot bench-lerobot test-faults test-ray test-torchrl torchrl-parity test-upstream-tdmpc2 bench bench-install install lint lint-install docs docs-install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# What the demo needs and nothing more (the package and gymnasium, which rolls out its dataset);
# `make test` adds the test and remote extras (moto, boto3, s3fs, ...) on top of it.
$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e '.[gym]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

TEST_STAMP := $(VENV)/.test-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

$(TEST_STAMP): $(STAMP)
	$(PIP_INSTALL) -e '.[test,remote]'
	rm -f $(VENV)/.test-* && touch $@

test-install: $(TEST_STAMP)

demo: install
	$(PY) examples/demo.py

# Ported training loops (replay-buffer code of TorchRL scripts on the local gym data, no network; < 1 min).
examples: install
	$(PY) examples/sac_ndim2.py
	$(PY) examples/torchrl_names.py
	$(PY) examples/torchrl_queries.py
	$(PY) examples/torchrl_consumption.py

# One worker per core (pytest-xdist): the suite is mostly subprocesses and I/O waits.
test: test-install
	$(PY) -m pytest -q -n auto -m "not ray and not slow and not upstream"

# Fault injection: seeded kill -9 trials, concurrent loaders, rm while sampling (~2-3 min).
test-faults: test-install
	$(PY) -m pytest -q -m "slow and not ray and not upstream"

# Ray installs in ~20 s and ray.init takes ~10-20 s on 2 cores: its tests have a target of their own.
test-ray: test-install
	$(PIP_INSTALL) -e '.[test,ray]'
	$(PY) -m pytest -q -m ray

# TorchRL pins its own tensordict: the interop tests run in the benchmark venv.
test-torchrl: bench-install
	$(BENCH_PY) -m pytest -q tests/test_torchrl.py

$(UPSTREAM_PY):
	$(PYTHON) -m venv $(UPSTREAM_VENV)
	$(UPSTREAM_PY) -m pip install -q --upgrade pip

# One resolution for everything (so pins agree), torch held to the CPU wheel by constraints.txt;
# then the packages whose declared dependencies would pull old pins or a CUDA build, --no-deps.
$(UPSTREAM_STAMP): $(UPSTREAM_PY) pyproject.toml constraints.txt $(UPSTREAM_REQS)
	$(UPSTREAM_PY) -m pip install -q --constraint constraints.txt torch==2.13.0
	$(UPSTREAM_PY) -m pip install -q --constraint constraints.txt -e '.[test,openx]' -r tests/upstream/requirements.txt
	$(UPSTREAM_PY) -m pip install -q --constraint constraints.txt --no-deps -r tests/upstream/requirements-nodeps.txt
	rm -rf $(UPSTREAM_VENV)/sdists $(OGBENCH_IMPLS) && mkdir -p $(OGBENCH_IMPLS)
	$(UPSTREAM_PY) -m pip download -q --no-deps --no-binary :all: --require-hashes \
		-r tests/upstream/requirements-sdist.txt -d $(UPSTREAM_VENV)/sdists
	tar -xzf $(UPSTREAM_VENV)/sdists/ogbench-*.tar.gz -C $(OGBENCH_IMPLS) --strip-components=1 --wildcards '*/impls'
	rm -f $(UPSTREAM_VENV)/.installed-* && touch $@

upstream-install: $(UPSTREAM_STAMP)

# Value-by-value comparisons with upstream's own code; a missing upstream package fails here (never skips).
# LeRobot's reference pins an older torch: its venv and tests are test-upstream-lerobot (run first).
test-upstream: upstream-install test-upstream-lerobot
	DATASETS_HUB_UPSTREAM_REQUIRED=1 $(UPSTREAM_PY) -m pytest -q -p no:cacheprovider tests/upstream tests/test_minari.py

# TorchRL's own replay-buffer tests (pytorch/rl test/rb, at the commit pinned in the script) against TorchRL and
# against us with only torchrl.data's names mapped: both pass rates and our failures by cause. Not part of CI.
# TORCHRL_SRC: a pytorch/rl clone (git clone https://github.com/pytorch/rl); ARGS: e.g. --files test_writers.py
TORCHRL_SRC ?=
torchrl-parity: bench-install
	@test -n "$(TORCHRL_SRC)" || (echo "usage: make torchrl-parity TORCHRL_SRC=path/to/pytorch-rl-clone [ARGS='--files test_writers.py']"; false)
	$(BENCH_PY) benchmarks/torchrl_parity.py --torchrl-src "$(TORCHRL_SRC)" $(ARGS)

# TD-MPC2's own reader (OfflineTrainer._load_dataset, Buffer.sample) against our loader, value by value. TD-MPC2
# is not on PyPI, so not part of CI: TDMPC2_SRC is a clone (git clone https://github.com/nicklashansen/tdmpc2).
# Its Buffer is a TorchRL replay buffer: the tests run in the benchmark venv.
TDMPC2_SRC ?=
test-upstream-tdmpc2: bench-install
	@test -n "$(TDMPC2_SRC)" || (echo "usage: make test-upstream-tdmpc2 TDMPC2_SRC=path/to/tdmpc2-clone"; false)
	DATASETS_HUB_UPSTREAM_REQUIRED=1 TDMPC2_SRC="$(TDMPC2_SRC)" $(BENCH_PY) -m pytest -q -p no:cacheprovider \
		tests/test_tdmpc2_upstream.py

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
	$(BENCH_PY) benchmarks/throughput.py
	$(BENCH_PY) benchmarks/build.py
	$(BENCH_PY) benchmarks/images.py
	$(BENCH_PY) benchmarks/goals.py
	$(BENCH_PY) benchmarks/ogbench_build.py
	$(BENCH_PY) benchmarks/replay_features.py
	$(BENCH_PY) benchmarks/device.py

# LeRobot's own reader (lerobot 0.4.4, which pins torch<2.11) in a venv of its own: installed with
# --no-deps next to our CPU torch, plus what its dataset module imports; torchcodec decodes with the
# system FFmpeg libraries (apt). A torchvision import stand-in (tests/upstream_shims) is added only when
# the real torchvision cannot be imported. Part of `make test-upstream`. About 1-3 min to build.
ULR_VENV := .venv-upstream-lerobot
ULR_PY := $(ULR_VENV)/bin/python
ULR_STAMP := $(ULR_VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
FFMPEG_LIBS := libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavdevice59 libavfilter8

$(ULR_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(ULR_VENV)
	$(ULR_PY) -m pip install -q --upgrade pip
	$(ULR_PY) -m pip install -q --constraint constraints.txt torch==2.13.0
	$(ULR_PY) -m pip install -q --no-deps lerobot==0.4.4 torchcodec==0.13.0
	$(ULR_PY) -m pip install -q --constraint constraints.txt "draccus==0.10.0" "datasets>=4,<5" \
		"huggingface-hub>=0.34.2,<0.36" "av>=15,<16" pandas pyarrow numpy pillow accelerate jsonlines \
		"tensordict>=0.14.3,<0.16" pyyaml filelock cloudpickle requests tqdm pytest pytest-timeout
	$(ULR_PY) -m pip install -q --no-deps -e .
	$(ULR_PY) -c "import torchvision" 2>/dev/null || echo "$(CURDIR)/tests/upstream_shims" > \
		"$$($(ULR_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_upstream_shims.pth"
	$(ULR_PY) -c "from torchcodec.decoders import VideoDecoder" 2>/dev/null || \
		$$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -q --no-install-recommends $(FFMPEG_LIBS)
	$(ULR_PY) -c "import lerobot.datasets.lerobot_dataset; from torchcodec.decoders import VideoDecoder"
	rm -f $(ULR_VENV)/.installed-* && touch $@

test-upstream-lerobot: $(ULR_STAMP)
	DATASETS_HUB_UPSTREAM_REQUIRED=1 $(ULR_PY) -m pytest -q tests/test_lerobot_upstream.py tests/test_lerobot_ports_upstream.py tests/test_exporters_upstream.py \
		-p no:cacheprovider

# LeRobot-format datasets: our build + windows vs LeRobotDataset(delta_timestamps) (~10-20 min, ~20 GB of disk
# for the ALOHA-shaped build; `--shapes pusht` alone takes ~3 min). Needs the venv above.
bench-lerobot: $(ULR_STAMP)
	$(ULR_PY) benchmarks/lerobot.py

# Lint and types: ruff (rules, formatter) and mypy (on datasets_hub and loaders), configured in pyproject.toml,
# installed from the `lint` extra.
LINT_STAMP := $(VENV)/.lint-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

$(LINT_STAMP): $(TEST_STAMP)
	$(PIP_INSTALL) -e '.[lint]'
	rm -f $(VENV)/.lint-* && touch $@

lint-install: $(LINT_STAMP)

lint: lint-install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@# a kept `# noqa` names its reason: `# noqa: CODE - why`
	@! grep -rnE --include='*.py' '# noqa(: *[A-Z]+[0-9]+(, *[A-Z]+[0-9]+)*)? *$$' datasets_hub loaders tests benchmarks examples \
		|| (echo "a # noqa above has no reason: write '# noqa: CODE - why'"; false)
	@# so does a kept `# type: ignore`: `# type: ignore[code]  # why`
	@! grep -rnE --include='*.py' '# type: ignore(\[[a-z, -]+\])? *$$' datasets_hub loaders tests benchmarks examples \
		|| (echo "a # type: ignore above has no reason: write '# type: ignore[code]  # why'"; false)

# The documentation site (mkdocs.yml): guide, datasets, design, API reference from the docstrings.
# --strict turns every warning (a broken link, an anchor, a docstring mkdocstrings cannot collect) into a failure.
DOCS_STAMP := $(VENV)/.docs-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)

$(DOCS_STAMP): $(TEST_STAMP)
	$(PIP_INSTALL) -e '.[docs]'
	rm -f $(VENV)/.docs-* && touch $@

docs-install: $(DOCS_STAMP)

docs: docs-install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(UPSTREAM_VENV) $(ULR_VENV) build site *.egg-info
