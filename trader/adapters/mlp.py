"""An actor exported as a plain MLP (``policy.safetensors`` + ``policy.json``: layer sizes,
activation, weights, how the mean is squashed) as one of our policies, with no Ray: how an RLlib
baseline (`trader.libraries.rllib`) comes back from RLlib's own environment.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from trader import rundir

ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}


def squash(mean: torch.Tensor, how: str) -> torch.Tensor:
    return torch.tanh(mean) if how == "tanh" else mean.clamp(-1.0, 1.0)


def build_mlp(sizes: list[int], tensors: list[torch.Tensor], activation: str = "tanh") -> torch.nn.Sequential:
    """Linear layers of `sizes` with the given weights and biases (alternating in
    `tensors`), `activation` between them: the exported actor, rebuilt on either side."""
    layers: list[torch.nn.Module] = []
    for k in range(len(sizes) - 1):
        linear = torch.nn.Linear(sizes[k], sizes[k + 1])
        linear.weight.data.copy_(tensors[2 * k])
        linear.bias.data.copy_(tensors[2 * k + 1])
        layers.append(linear)
        if k < len(sizes) - 2:
            layers.append(ACTIVATIONS[activation]())
    return torch.nn.Sequential(*layers)


class MLPPolicy:
    """An exported RLlib actor: the MLP's Gaussian mean (the first ``act_dim`` outputs),
    clipped (PPO) or through tanh (SAC) as ``policy.json`` says."""

    def __init__(self, path: Path, device: str = "cpu") -> None:
        meta = rundir.read_json(path.with_suffix(".json"))
        tensors = load_file(str(path))
        self.act_dim = int(meta["act_dim"])
        self.how = str(meta.get("squash", "clip"))  # the first exports (PPO only) did not say
        self.net = build_mlp(list(meta["sizes"]), [tensors[f"t{k}"] for k in range(len(tensors))], meta["activation"])
        self.net.to(device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return squash(self.net(obs.float())[..., : self.act_dim], self.how)
