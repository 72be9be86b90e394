"""preprocess(..., backend="ray"): chunks as Ray tasks on a local Ray instance (slow to start: kept few)."""

from __future__ import annotations

import functools

import pytest
import torch

from datasets_hub.errors import PreprocessError
from datasets_hub.preprocess.chunks import probe_calls

from fixtures.preprocess import N, calls, counted, fails_on_row_170, fake_rb, obs_feature

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray  # `make test-ray`; `make test` skips these


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_ray_tasks_give_the_in_process_result_and_reuse_it(tmp_path):
    rb = fake_rb()
    log = tmp_path / "log"
    fn = functools.partial(counted, log=str(log), scale=3.0)
    out = rb.preprocess(fn, backend="ray", chunk_size=40)
    assert calls(log) == probe_calls(N) + 5  # the probes here, 5 chunks in Ray workers
    torch.testing.assert_close(out[:]["r"], rb[:]["next", "reward"] * 3)
    assert len(set(out[:]["pid"].reshape(-1).tolist())) >= 1
    assert out.storage.manifest["backend"] == "ray"
    again = rb.preprocess(fn, backend="ray", chunk_size=40)
    assert calls(log) == probe_calls(N) + 5 and again.storage.path == out.storage.path
    lam = rb.preprocess(lambda td: td.set("y", td["observation"] * 2), backend="ray", chunk_size=64)
    torch.testing.assert_close(lam[:]["y"], obs_feature(rb[:])["observation"] * 2)


def test_ray_task_errors_name_fn_and_rows():
    with pytest.raises(PreprocessError, match=r"fails_on_row_170 failed on transitions \[150, 200\)"):
        fake_rb().preprocess(fails_on_row_170, backend="ray", chunk_size=50)
