"""Samplers, one module per role; each returns row indices into a storage and never gathers data.

- ``base``: the :class:`Sampler` contract every sampler follows, and ``as_index``.
- ``random``: uniform over the rows, with replacement (:class:`RandomSampler`) or in epochs without
  (:class:`SamplerWithoutReplacement`).
- ``slice`` (+ ``slice_layout``): contiguous slices inside episodes (:class:`SliceSampler`,
  :class:`SliceSamplerWithoutReplacement`).
- ``prioritized``: segment trees, priority reductions, :class:`PrioritizedSampler` and
  :class:`PrioritizedSliceSampler`.
- ``prompt_group``: :class:`PromptGroupSampler`, whole groups of items sharing a key (LLM post-training).
- ``staleness``: :class:`StalenessAwareSampler`, items weighted by the freshness of their policy version.
- ``sample_units``: what each drawn anchor expands into (``ReplayBuffer(sample_unit=...)``): :class:`Transition`
  (itself) or :class:`Sequence` (a window with burn-in and bootstrap records).
- ``frame_stack``: :class:`FullStackSampler`, the transitions whose frame stack lies in their episode.
- ``episode_rows``: rows located in their episodes, the base of the samplers that look beyond the row
  they draw (:class:`AnchorSampler`): ``window`` (:class:`WindowSampler`), ``goal``
  (:class:`GoalSampler`), ``n_step`` (:class:`NStepReturnSampler`).

The public names are re-exported by ``datasets_hub``; modules inside this package import each other's
modules directly, never this package.
"""

from datasets_hub.buffers.samplers.base import Sampler
from datasets_hub.buffers.samplers.episode_rows import AnchorSampler
from datasets_hub.buffers.samplers.frame_stack import FullStackSampler
from datasets_hub.buffers.samplers.goal import GoalSampler
from datasets_hub.buffers.samplers.n_step import NStepReturnSampler
from datasets_hub.buffers.samplers.prioritized import PrioritizedSampler, PrioritizedSliceSampler
from datasets_hub.buffers.samplers.prompt_group import PromptGroupSampler
from datasets_hub.buffers.samplers.random import RandomSampler, SamplerWithoutReplacement
from datasets_hub.buffers.samplers.sample_units import SampleUnit, Sequence, Transition
from datasets_hub.buffers.samplers.slice import SliceSampler, SliceSamplerWithoutReplacement
from datasets_hub.buffers.samplers.staleness import StalenessAwareSampler
from datasets_hub.buffers.samplers.window import WindowSampler

__all__ = [
    "AnchorSampler",
    "FullStackSampler",
    "GoalSampler",
    "NStepReturnSampler",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomSampler",
    "SampleUnit",
    "Sampler",
    "SamplerWithoutReplacement",
    "Sequence",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
    "Transition",
    "WindowSampler",
]
