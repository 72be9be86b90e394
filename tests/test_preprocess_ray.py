"""preprocess(..., backend="ray"): chunks as Ray tasks on a local Ray instance (slow to start: kept few)."""

from __future__ import annotations

import functools

import pytest
import torch

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray  # `make test-ray`; `make test` skips these

from datasets_hub.errors import PreprocessError  # noqa: E402
from test_preprocess import calls, counted, fails_on_row_120, fake_rb, obs_feature  # noqa: E402


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
    assert calls(log) == 1 + 5  # the probe here, 5 chunks in Ray workers
    torch.testing.assert_close(out[:]["r"], rb[:]["next", "reward"] * 3)
    assert len(set(out[:]["pid"].reshape(-1).tolist())) >= 1
    assert out.storage.manifest["backend"] == "ray"
    again = rb.preprocess(fn, backend="ray")
    assert calls(log) == 6 and again.storage.path == out.storage.path
    lam = rb.preprocess(lambda td: td.set("y", td["observation"] * 2), backend="ray", chunk_size=64)
    torch.testing.assert_close(lam[:]["y"], obs_feature(rb[:])["observation"] * 2)


def test_ray_task_errors_name_fn_and_rows():
    with pytest.raises(PreprocessError, match=r"fails_on_row_120 failed on transitions \[100, 150\)"):
        fake_rb().preprocess(fails_on_row_120, backend="ray", chunk_size=50)
