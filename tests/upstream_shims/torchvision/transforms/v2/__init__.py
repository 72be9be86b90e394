"""Import stand-in (see tests/upstream_shims/README.md): a Transform base class so that LeRobot's
own transform classes can be defined; nothing here transforms an image."""

import torch

from . import functional  # noqa: F401 - makes the submodule an attribute, as in torchvision


class Transform(torch.nn.Module):
    def forward(self, *inputs):
        raise NotImplementedError("torchvision stand-in: image transforms are not available")


class Identity(Transform):
    def forward(self, *inputs):
        return inputs[0] if len(inputs) == 1 else inputs
