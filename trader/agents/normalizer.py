"""Running observation normaliser: mean and variance on the device, part of the agent state.

Statistics are merged batch by batch with the parallel form of Welford's algorithm
(Chan, Golub and LeVeque): a batch of B rows is reduced to (mean, M2, B) in one pass
of tensor operations and combined with the running (mean, M2, count). The result
matches `numpy.mean` / `numpy.var` (population variance) of every row seen so far.
Statistics are kept in float64 so that millions of updates do not drift.

With ``groups`` (a group id per column), the columns of one group share one mean and
variance: those of all their values pooled, as if the group were one variable (the
per-stock network's normaliser: feature f of every stock is one variable). Pooling
the merged per-column statistics after each batch gives exactly the pooled
statistics of everything seen, because all columns of a group hold the same count.
"""

from __future__ import annotations

import torch
from torch import Tensor

from market_envs.devices import resolve_device
from trader.errors import ConfigError

_STATE_KEYS = ("mean", "var", "count")


class ObsNormalizer:
    """Running mean/variance of observations; `normalize` maps to (x - mean) / std, clipped.

    :param dim: observation size (last dimension of every batch).
    :param device: where the statistics live (the env's device).
    :param clip: normalised values are clipped to [-clip, clip].
    :param eps: added to the variance before the square root.
    :param enabled: when False, `update` does nothing and `normalize` is the identity
        (the statistics stay in the state so checkpoints keep one layout).
    :param groups: optional group id per column (int [dim]); columns of a group share
        their statistics (see the module docstring).
    """

    def __init__(
        self,
        dim: int,
        device: torch.device | str = "cpu",
        clip: float = 10.0,
        eps: float = 1e-8,
        enabled: bool = True,
        groups: Tensor | None = None,
    ) -> None:
        if dim <= 0:
            raise ConfigError(f"ObsNormalizer: dim must be positive, got {dim}")
        if clip <= 0:
            raise ConfigError(f"ObsNormalizer: clip must be positive, got {clip}")
        self.dim = dim
        self.device = resolve_device(device)
        self.clip = float(clip)
        self.eps = float(eps)
        self.enabled = enabled
        self.mean = torch.zeros(dim, dtype=torch.float64, device=self.device)
        self.var = torch.ones(dim, dtype=torch.float64, device=self.device)
        self.count = torch.zeros((), dtype=torch.float64, device=self.device)
        if groups is not None and tuple(groups.shape) != (dim,):
            raise ConfigError(f"ObsNormalizer: groups must have shape ({dim},), got {tuple(groups.shape)}")
        self.groups = None if groups is None else groups.to(self.device, torch.long)
        self.group_size = None if groups is None else torch.bincount(self.groups).to(torch.float64)

    @torch.no_grad()
    def update(self, batch: Tensor) -> None:
        """Merge a batch of observations [..., dim] into the running statistics."""
        if not self.enabled:
            return
        if batch.shape[-1] != self.dim:
            raise ConfigError(
                f"ObsNormalizer.update: expected last dimension {self.dim}, got shape {tuple(batch.shape)}"
            )
        rows = batch.reshape(-1, self.dim).to(torch.float64)
        n_batch = rows.shape[0]
        if n_batch == 0:
            return
        batch_mean = rows.mean(dim=0)
        batch_m2 = ((rows - batch_mean) ** 2).sum(dim=0)
        total = self.count + n_batch
        delta = batch_mean - self.mean
        running_m2 = self.var * self.count
        merged_m2 = running_m2 + batch_m2 + delta**2 * self.count * n_batch / total
        self.mean = self.mean + delta * n_batch / total
        self.var = merged_m2 / total
        self.count = total
        if self.groups is not None:
            self._pool()

    def _pool(self) -> None:
        """Give every column its group's pooled mean and variance."""
        size = self.group_size
        mean = torch.zeros_like(size).index_add_(0, self.groups, self.mean) / size
        second = torch.zeros_like(size).index_add_(0, self.groups, self.var + self.mean**2) / size
        self.mean = mean[self.groups]
        self.var = (second - mean**2).clamp_min(0.0)[self.groups]

    def normalize(self, obs: Tensor) -> Tensor:
        """Return (obs - mean) / sqrt(var + eps), clipped, in obs's dtype."""
        if not self.enabled:
            return obs
        mean = self.mean.to(obs.dtype)
        std = torch.sqrt(self.var + self.eps).to(obs.dtype)
        return ((obs - mean) / std).clamp(-self.clip, self.clip)

    def state_dict(self) -> dict[str, Tensor]:
        """Flat tensors: mean [dim], var [dim], count [] (all float64)."""
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore statistics saved by `state_dict`; shapes must match."""
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise ConfigError(f"ObsNormalizer.load_state_dict: missing keys {missing}")
        for key in ("mean", "var"):
            if tuple(state[key].shape) != (self.dim,):
                raise ConfigError(
                    f"ObsNormalizer.load_state_dict: '{key}' has shape "
                    f"{tuple(state[key].shape)}, expected ({self.dim},)"
                )
        self.mean = state["mean"].to(self.device, torch.float64).clone()
        self.var = state["var"].to(self.device, torch.float64).clone()
        self.count = state["count"].to(self.device, torch.float64).reshape(()).clone()

    def to(self, device: torch.device | str) -> ObsNormalizer:
        """Move the statistics to `device` (in place); return self."""
        self.device = resolve_device(device)
        self.mean = self.mean.to(self.device)
        self.var = self.var.to(self.device)
        self.count = self.count.to(self.device)
        if self.groups is not None:
            self.groups = self.groups.to(self.device)
            self.group_size = self.group_size.to(self.device)
        return self

    def summary(self) -> dict[str, object]:
        """JSON-able statistics for a checkpoint sidecar (copied to the host once)."""
        return {
            "enabled": self.enabled,
            "clip": self.clip,
            "eps": self.eps,
            "count": float(self.count.cpu()),
            "mean": self.mean.cpu().tolist(),
            "var": self.var.cpu().tolist(),
        }
