"""One spelling of a device for every tensor and every comparison.

``torch.device("cuda")`` has no index, while every CUDA tensor's ``.device`` has one
(``cuda:0``), and the two compare unequal. A component that stored the device it was
given and then checked its inputs' devices against it refused its own tensors on a
GPU. `resolve_device` gives the indexed device that tensors report, so stored devices
and tensor devices compare equal.
"""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """The device as a tensor placed there reports it: ``"cuda"`` becomes ``cuda:N``.

    N is the current CUDA device, as for a tensor created with ``device="cuda"``.
    A CPU device stays ``cpu``. Where CUDA is missing ``"cuda"`` is returned as it is,
    so that the caller's own check can name what was asked for.
    """
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device
