"""The per-stock network: one small MLP shared by every stock (``network="per_stock"``).

A flat MLP over the market env's observation must learn each stock's rule
separately, from a reward that sums every position, and grows with the number of
stocks N. The per-stock network applies the **same weights to each stock**:

1. **encoder**: stock i's own inputs ``x_i`` (its position share, its F features and,
   for a Q-network, its action) -> ``h_i`` (one layer of width ``hidden[0]``);
2. **context**: the mean of ``h_i`` over the stocks (a pooled summary of the whole
   book, the same for every stock) and the cash share;
3. **head**: ``[h_i, context, cash]`` -> layers ``hidden[1:]`` -> stock i's outputs.

So permuting the stocks permutes the outputs (equivariance), the parameter count does
not depend on N, and every stock's transitions teach the one rule. An actor reads
the outputs per stock (a mean, a log-std); a critic or Q-network sums them over the
stocks into one value (the reward is a sum over positions too).

It relies on the market env's observation layout (see `market_envs.env`):
``[cash share | N position shares | N x F features, stock-major]`` with k actions
per stock in k blocks of N (k = 1; 2 under ``EnvConfig.rate_action``: aims then trade
rates), so N and F follow from ``(obs_dim, act_dim, k)`` (`stock_layout`). An actor's
stock i gives its k outputs, block j holding output j of every stock; a Q-network's
stock i reads its k actions.

``num_nets = K`` networks of the same shape are held as one batched module (weights
``[K, in, out]``, one ``bmm`` per layer), as `trader.agents.offpolicy.TwinQ` does for
the twin critics.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from trader.agents.population import aligned_rows
from trader.errors import ConfigError

NETWORKS = ("mlp", "per_stock")
"""The ``network`` choices of every algorithm's config."""

Activation = Literal["relu", "tanh"]


class _Tanh(torch.autograd.Function):
    """tanh as ``2 sigmoid(2x) - 1``: see `tanh`."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        y = torch.sigmoid(x * 2.0)
        y.mul_(2.0).sub_(1.0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)  # grad x (1 - y^2), one pass


def tanh(x: Tensor) -> Tensor:
    """The hyperbolic tangent of the per-stock networks, computed as ``2 sigmoid(2x) - 1``.

    On the CPU torch's own ``tanh`` kernel is several times slower than its ``sigmoid`` (float32,
    one thread, AVX-512: 21.7 against 3.5 ms for 6.5M elements, benchmarks/RESULTS.md, "Time to
    learn"), and a PPO update of the per-stock network is mostly tanh: B x N rows of width H,
    twice per network. This form costs about 40% of it and differs from ``torch.tanh`` by at most
    about 2e-7 (float32 rounding of a value near 1); its gradient is tanh's, from the output."""
    return _Tanh.apply(x)


def check_network(owner: str, network: str) -> None:
    """Raise ``ConfigError`` unless ``network`` is one of `NETWORKS`."""
    if network not in NETWORKS:
        raise ConfigError(f"{owner}.network must be one of {', '.join(NETWORKS)}, got {network!r}")


def stock_layout(obs_dim: int, act_dim: int, actions_per_stock: int = 1) -> tuple[int, int]:
    """``(N stocks, F features per stock)`` of a market observation, from its sizes.

    Raises ``ConfigError`` when the sizes cannot be the market layout
    ``obs_dim = 1 + N + N x F`` with ``act_dim = k x N``, k = `actions_per_stock`
    (a gymnasium env, say), F >= 1 (the env always observes a feature). k is not guessed from
    the sizes: 2N actions over ``1 + N(1 + F)`` columns also read as 2N stocks whenever F is odd
    (F = 1 reads as 2N stocks without features, which F >= 1 refuses).
    """
    stocks = act_dim // actions_per_stock if actions_per_stock >= 1 else 0
    rest = obs_dim - 1 - stocks
    if stocks < 1 or act_dim != stocks * actions_per_stock or rest < stocks or rest % stocks:
        raise ConfigError(
            f"network='per_stock' needs a market env's observation (1 + N + N x F columns, "
            f"{actions_per_stock} x N actions); obs_dim {obs_dim} with act_dim {act_dim} is not one: "
            "use network='mlp'"
        )
    return stocks, rest // stocks


def stock_groups(num_stocks: int, num_features: int) -> Tensor:
    """Column -> group id of a market observation, for a normaliser shared across stocks:
    0 the cash share, 1 every position share, 2 + f every stock's feature f."""
    features = torch.arange(num_features).repeat(num_stocks) + 2
    return torch.cat([torch.tensor([0]), torch.ones(num_stocks, dtype=torch.long), features])


def obs_groups(network: str, obs_dim: int, act_dim: int, actions_per_stock: int = 1) -> Tensor | None:
    """The normaliser's column groups for ``network`` (None: one statistic per column)."""
    if network != "per_stock":
        return None
    return stock_groups(*stock_layout(obs_dim, act_dim, actions_per_stock))


def split_stocks(obs: Tensor, num_stocks: int, num_features: int) -> tuple[Tensor, Tensor]:
    """``(cash [B, 1], per-stock inputs [B, N, 1 + F])`` of observations ``[B, obs_dim]``."""
    batch = obs.shape[0]
    positions = obs[:, 1 : 1 + num_stocks].unsqueeze(-1)
    features = obs[:, 1 + num_stocks :].reshape(batch, num_stocks, num_features)
    return obs[:, :1], torch.cat([positions, features], dim=-1)


class PerStockNet(nn.Module):
    """K per-stock networks as one module; `forward` returns ``[K, B, N, out_per_stock]``.

    :param num_stocks: N.
    :param num_features: F, features per stock in the observation.
    :param hidden: widths; ``hidden[0]`` is the encoder's, the rest the head's layers.
    :param out_per_stock: outputs per stock (1: an action mean or a value share).
    :param num_nets: K networks with independent weights (2 for twin critics).
    :param action_inputs: each stock's input also holds its actions (Q-networks): 0 (False)
        none, 1 (True) or k, read from k blocks of N (`stock_layout`).
    :param activation: "relu" (SAC, TD3) or "tanh" (PPO).
    :param orthogonal_gain: None: `nn.Linear`'s uniform init (SAC, TD3); a float:
        orthogonal init with gain sqrt(2) on hidden layers and this gain on the output
        layer, zero biases (PPO, as CleanRL).
    """

    def __init__(
        self,
        num_stocks: int,
        num_features: int,
        hidden: Sequence[int],
        out_per_stock: int,
        *,
        num_nets: int = 1,
        action_inputs: int = 0,
        activation: Activation = "relu",
        orthogonal_gain: float | None = None,
    ) -> None:
        super().__init__()
        if not hidden:
            raise ConfigError("PerStockNet needs at least one hidden width (the encoder's)")
        self.num_stocks = int(num_stocks)
        self.num_features = int(num_features)
        self.num_nets = int(num_nets)
        self.action_inputs = int(action_inputs)
        self.activation = tanh if activation == "tanh" else torch.relu
        encoder = int(hidden[0])
        widths = [1 + num_features + self.action_inputs, encoder, 2 * encoder + 1, *hidden[1:], out_per_stock]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        layers = [(widths[0], widths[1])] + list(zip(widths[2:-1], widths[3:], strict=True))
        for index, (fan_in, fan_out) in enumerate(layers):
            last = index == len(layers) - 1
            weight, bias = batched_layer(num_nets, fan_in, fan_out, orthogonal_gain, last)
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(bias))

    def forward(self, obs: Tensor, actions: Tensor | None = None, params: Sequence[Tensor] | None = None) -> Tensor:
        """Outputs ``[K, B, N, out]`` for normalised observations ``[B, obs_dim]`` (every net
        reads them), or ``[K, B, obs_dim]``: net k reads its own (a pod group's K pods,
        `trader.agents.ppo_group`), each net's result then the same whatever K is, bit for bit.

        :param actions: ``[B, k x N]`` (k blocks of N), required when built with ``action_inputs = k``.
        :param params: replacement parameters in `parameters()` order (weights then
            biases), e.g. detached copies, as `TwinQ.forward` takes them.
        """
        weights, biases = weights_and_biases(self.weights, self.biases, params)
        own = obs.ndim == 3  # each net its own observations
        flat = obs.reshape(-1, obs.shape[-1])
        cash, x = split_stocks(flat, self.num_stocks, self.num_features)
        if self.action_inputs:
            if actions is None:
                raise ValueError("PerStockNet built with action_inputs needs actions")
            actions = actions.reshape(-1, actions.shape[-1])
            per_stock = actions.reshape(actions.shape[0], self.action_inputs, self.num_stocks).transpose(1, 2)
            x = torch.cat([x, per_stock], dim=-1)
        stocks, k = self.num_stocks, weights[0].shape[0]  # K nets, or as many as ``params`` hold
        batch = obs.shape[1] if own else obs.shape[0]
        rows = (
            aligned_rows(x.reshape(k, batch * stocks, -1))
            if own
            else x.reshape(1, batch * stocks, -1).expand(k, -1, -1)
        )
        h = self.activation(torch.baddbmm(biases[0], rows, weights[0]))  # [K, B*N, H]
        width = h.shape[-1]
        # The head's first layer on [h_i, context, cash], computed without building that
        # concatenation: the context and cash terms are the same for every stock, so
        # they are computed once per sample and broadcast over the stocks.
        head = weights[1]  # [K, 2H+1, O]
        context = h.reshape(k, batch, stocks, width).mean(dim=2)  # [K, B, H]
        cash = cash.reshape(k if own else 1, batch, 1)
        shared = torch.bmm(context, head[:, width : 2 * width]) + cash * head[:, 2 * width :]
        z = torch.bmm(h, head[:, :width]).reshape(k, batch, stocks, -1) + (shared + biases[1]).unsqueeze(2)
        z = z.reshape(k, batch * stocks, -1)
        for weight, bias in zip(weights[2:], biases[2:], strict=True):
            z = self.activation(z)
            if own:
                z = aligned_rows(z)
            if own and weight.shape[-1] == 1:  # the batched product's K = 1 path rounds otherwise
                z = (z * weight.transpose(1, 2)).sum(dim=-1, keepdim=True) + bias
            else:
                z = torch.baddbmm(bias, z, weight)
        return z.reshape(k, batch, stocks, -1)

    def detached_params(self) -> list[Tensor]:
        """Parameters (weights then biases) detached from autograd, sharing storage."""
        return [p.detach() for p in self.parameters()]


def stack_per_stock(nets: Sequence[PerStockNet]) -> PerStockNet:
    """P single per-stock networks of one shape as one `PerStockNet` of ``num_nets = P`` (net p
    holding network p's weights), to run with ``[P, B, obs_dim]`` observations (a pod group);
    `per_stock_row` gives net p's state back in a single network's layout."""
    first = nets[0]
    if any(
        net.num_nets != 1 or [p.shape for p in net.parameters()] != [p.shape for p in first.parameters()]
        for net in nets
    ):
        raise ValueError("stack_per_stock: the networks must be single networks of one shape")
    stacked = copy.deepcopy(first)
    stacked.num_nets = len(nets)
    with torch.no_grad():
        for name in ("weights", "biases"):
            for index, param in enumerate(getattr(stacked, name)):
                param.data = torch.cat([getattr(net, name)[index].detach() for net in nets]).contiguous()
    return stacked


def per_stock_row(stacked: PerStockNet, row: int) -> dict[str, Tensor]:
    """Net ``row`` of a `stack_per_stock` stack as a single network's ``state_dict`` (copies)."""
    return {name: value.detach()[row : row + 1].clone() for name, value in stacked.state_dict().items()}


def weights_and_biases(
    weights: Sequence[Tensor], biases: Sequence[Tensor], params: Sequence[Tensor] | None
) -> tuple[list[Tensor], list[Tensor]]:
    """A batched module's layers, or ``params`` in its `parameters()` order instead
    (weights then biases; e.g. detached copies for a policy loss through a critic)."""
    if params is None:
        return list(weights), list(biases)
    half = len(params) // 2
    return list(params[:half]), list(params[half:])


def batched_layer(
    num_nets: int, fan_in: int, fan_out: int, orthogonal_gain: float | None = None, last: bool = False
) -> tuple[Tensor, Tensor]:
    """Weights ``[K, in, out]`` and biases ``[K, 1, out]``, each net's drawn independently:
    `nn.Linear`'s uniform init, or orthogonal with ``orthogonal_gain`` (see `PerStockNet`)."""
    if orthogonal_gain is None:
        bound = 1.0 / math.sqrt(fan_in)
        weight = torch.empty(num_nets, fan_in, fan_out).uniform_(-bound, bound)
        return weight, torch.empty(num_nets, 1, fan_out).uniform_(-bound, bound)
    gain = orthogonal_gain if last else math.sqrt(2.0)
    weight = torch.empty(num_nets, fan_out, fan_in)
    for k in range(num_nets):
        nn.init.orthogonal_(weight[k], gain)
    return weight.transpose(1, 2).contiguous(), torch.zeros(num_nets, 1, fan_out)


class PerStockPolicyHead(nn.Module):
    """An actor's per-stock network as a drop-in for ``mlp(obs_dim, hidden, m x act_dim)``:
    ``[B, obs_dim] -> [B, m x k x N]`` (m = `outputs_per_stock` outputs of each of a stock's
    k = `actions_per_stock` actions), output j of every stock in block j: so ``.chunk(m, dim=-1)``
    splits means from log-stds as with the flat MLP, and each part is the env's action layout
    (k blocks of N: aims, then trade rates under ``EnvConfig.rate_action``)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int],
        outputs_per_stock: int = 1,
        activation: Activation = "relu",
        orthogonal_gain: float | None = None,
        actions_per_stock: int = 1,
    ) -> None:
        super().__init__()
        stocks, features = stock_layout(obs_dim, act_dim, actions_per_stock)
        self.net = PerStockNet(
            stocks,
            features,
            hidden,
            outputs_per_stock * actions_per_stock,
            activation=activation,
            orthogonal_gain=orthogonal_gain,
        )

    def forward(self, obs: Tensor) -> Tensor:
        out = self.net(obs)[0]  # [B, N, k]
        return out.transpose(1, 2).reshape(out.shape[0], -1)


class PerStockValue(nn.Module):
    """A state-value network ``[B, obs_dim] -> [B, 1]``: per-stock shares summed."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: Sequence[int],
        activation: Activation = "tanh",
        orthogonal_gain: float | None = 1.0,
        actions_per_stock: int = 1,
    ) -> None:
        super().__init__()
        stocks, features = stock_layout(obs_dim, act_dim, actions_per_stock)
        self.net = PerStockNet(stocks, features, hidden, 1, activation=activation, orthogonal_gain=orthogonal_gain)

    def forward(self, obs: Tensor) -> Tensor:
        return self.net(obs)[0].sum(dim=1)  # [B, N, 1] -> [B, 1]


class PerStockTwinQ(nn.Module):
    """``num_q`` Q-networks, each the sum over stocks of a per-stock Q share; the same
    interface as `TwinQ`: ``forward(obs, actions, params=None) -> [K, B]``."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], num_q: int = 2, actions_per_stock: int = 1
    ) -> None:
        super().__init__()
        stocks, features = stock_layout(obs_dim, act_dim, actions_per_stock)
        self.net = PerStockNet(stocks, features, hidden_sizes, 1, num_nets=num_q, action_inputs=actions_per_stock)

    def forward(self, obs: Tensor, actions: Tensor, params: Sequence[Tensor] | None = None) -> Tensor:
        return self.net(obs, actions, params).sum(dim=2).squeeze(-1)  # [K, B, N, 1] -> [K, B]

    def detached_params(self) -> list[Tensor]:
        return self.net.detached_params()
