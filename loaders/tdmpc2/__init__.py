"""TD-MPC2's mt30/mt80 multi-task datasets (TensorDict chunks, loaded without unpickling code): see :mod:`.loader`."""

from datasets_hub.loaders.tdmpc2.loader import TDMPC2Loader
from datasets_hub.loaders.tdmpc2.safe_load import UnsafeChunk, load_tensordict
from datasets_hub.loaders.tdmpc2.tasks import TASK_SETS

__all__ = ["TASK_SETS", "TDMPC2Loader", "UnsafeChunk", "load_tensordict"]
