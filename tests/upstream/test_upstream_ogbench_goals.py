"""GoalSampler against OGBench's own ``GCDataset``/``HGCDataset`` (``impls/utils/datasets.py``), run unchanged.

OGBench's training code is not in its wheel; its PyPI sdist (``ogbench==1.2.2``, hash-pinned in
``tests/upstream/requirements-sdist.txt``) ships it, and ``make upstream-install`` unpacks its ``impls/`` into
``.venv-upstream/ogbench-impls/`` (nothing is fetched at test time). The file is loaded as a module from
there, byte for byte; it imports jax and flax (``requirements.txt``).

For every config OGBench ships (``tests/fixtures/ogbench_goal_laws.py``: GCIVL, GCIQL, QRL, CRL, GCBC, HIQL
and the ``hyperparameters.sh`` variants), one file in OGBench's format is read by upstream's
``load_dataset`` (compact, as ``impls/`` trains, and regular) into upstream's dataset class, and by our
ogbench loader into a buffer with the config's ``GoalSampler``. Each goal upstream returns (value goals
with their reward, actor goals, low and high actor goals, high actor targets) is compared as pairs
``(anchor state, goal state)``: two-sample chi-square at p = 1e-4, fixed seeds, 300,000 samples a side.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared fixtures

from test_upstream_ogbench import upstream_reader
from upstream_ref import upstream, upstream_required

from datasets_hub.buffers.replay_buffers import TensorDictReplayBuffer
from datasets_hub.buffers.tensor_storages import LazyTensorStorage
from datasets_hub.loader import DatasetSpec, LoaderContext
from datasets_hub.loaders.ogbench.loader import OGBenchLoader

from fixtures import ogbench_goal_laws as og
from fixtures.ogbench_files import write_ogbench

N = 300_000
#: where `make upstream-install` unpacks the sdist's impls/ (override with DATASETS_HUB_OGBENCH_IMPLS)
IMPLS = Path(os.environ.get("DATASETS_HUB_OGBENCH_IMPLS", Path(sys.prefix) / "ogbench-impls" / "impls"))


def upstream_datasets() -> ModuleType:
    """OGBench's ``impls/utils/datasets.py``, unchanged, as a module (it needs jax and flax)."""
    upstream("jax")
    upstream("flax.core.frozen_dict")
    path = IMPLS / "utils" / "datasets.py"
    if not path.is_file():
        message = f"OGBench's {path} is missing: `make upstream-install` unpacks it from the ogbench sdist"
        if upstream_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    spec = importlib.util.spec_from_file_location("ogbench_impls_datasets", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def npz(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ogbench") / "antmaze-medium-navigate-v0.npz"
    write_ogbench(path, og.LENGTHS, info=False)
    return path


def our_buffer(path: Path, config: dict) -> TensorDictReplayBuffer:
    spec = DatasetSpec(id=f"ogbench/{path.stem}", loader="ogbench")
    chunks = list(OGBenchLoader().episodes(spec, {path.name: path}, LoaderContext(chunk_rows=7)))
    data = torch.cat(chunks)
    generator = torch.Generator().manual_seed(11)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(len(data)), sampler=og.our_sampler(config), generator=generator
    )
    rb.extend(data)
    return rb


@pytest.mark.parametrize("form", ["compact", "regular"])
@pytest.mark.parametrize("name", sorted(og.CONFIGS))
def test_goal_laws_equal_ogbench_gcdataset(npz, name, form):
    impls = upstream_datasets()
    utils = upstream_reader()
    config = og.CONFIGS[name]
    arrays = utils.load_dataset(str(npz), compact_dataset=form == "compact")
    dataset_class = {"GCDataset": impls.GCDataset, "HGCDataset": impls.HGCDataset}[config["dataset_class"]]
    theirs_sampler = dataset_class(impls.Dataset.create(**arrays), dict(config))
    np.random.seed(5)  # upstream draws from numpy's global generator
    theirs = og.upstream_cells(theirs_sampler.sample(N), config)
    ours = og.our_cells(our_buffer(npz, config).sample(N), config)
    for field in og.fields(config):
        ok, stat, df, one_sided = og.same_law(ours[field], theirs[field])
        assert ok, f"{field}: chi2 {stat:.1f} on {df} df; cells only one side reached: {one_sided[:5]}"
