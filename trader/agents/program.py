"""Deterministic policies as `market_envs.rollout` programs: S networks, one row each.

A validation pass or a backtest calls a policy once per bar. `PolicyProgram` is the
same decision written for `market_envs.rollout.Rollout`, which runs many bars per
call: the weights are inputs (a new snapshot of the same network does not recompile),
and the part of the first layer that reads the market features, which no decision
changes, is computed for all the bars of a chunk in one matrix product (`prepare`).
Per bar (`decide`) only the part that reads the account (cash and position columns)
and the layers after it remain. With 64 flat MLPs over 100 tickers x 14 columns, the
first layer is 23 MB of weights: read once per chunk instead of once per bar.

S policies of one architecture are stacked (weights [S, ...]) and decide S rows, row
s by policy s: the agents of a backtest, the snapshots of a run.

What the decision is, as the agents define it (`Agent.act(obs, deterministic=True)`):
normalise the observation (the agent's `ObsNormalizer`: (x - mean) / std, clipped),
run the actor's trunk (a flat MLP, `nn.Sequential` of `nn.Linear` and tanh / ReLU, or
the per-stock network of `trader.agents.networks`), take the first block of its
outputs (SAC's means; its log-stds are the second) and squash it (PPO clips to
[-1, 1], SAC and TD3 take tanh). The first layer's product is split in two sums, so
the actions equal `act`'s within float32 rounding (tests/test_rollout.py); the per-stock network's
tanh is a rational function here (`rational_tanh`, within 4e-7 of tanh), cheaper than the agents'
sigmoid form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from trader.agents.networks import PerStockNet, PerStockPolicyHead, tanh

Squash = Literal["clamp", "tanh", "none"]
_ACTIVATIONS = {nn.Tanh: "tanh", nn.ReLU: "relu"}


def _activate(x: Tensor, name: str) -> Tensor:
    """A flat MLP's activation (`nn.Tanh`, `nn.ReLU`)."""
    return torch.tanh(x) if name == "tanh" else torch.relu(x)


@dataclass(frozen=True)
class PolicyProgram:
    """S stacked deterministic policies as a `market_envs.rollout.Program`.

    :param trunk: "mlp" (a flat `nn.Sequential`) or "per_stock" (`PerStockNet`).
    :param layers: mlp: the modules in order, "linear", "tanh" or "relu"; per_stock: its
        activation, once.
    :param num_stocks: N, from the observation layout ``[cash, N positions, N x F features]``.
    :param num_features: F.
    :param blocks: outputs per action of the trunk (2 for SAC's mean and log-std); block 0 decides.
    :param squash: what maps block 0 into [-1, 1].
    :param normalize: the observation is normalised first (params ``mean`` and ``std``).
    :param clip: the normaliser's clip.
    """

    trunk: Literal["mlp", "per_stock"]
    layers: tuple[str, ...]
    num_stocks: int
    num_features: int
    blocks: int = 1
    squash: Squash = "none"
    normalize: bool = False
    clip: float = 10.0

    @property
    def width(self) -> int:
        """Columns of the account part of an observation (cash and positions)."""
        return 1 + self.num_stocks

    def _normalized(self, params: dict[str, Any], x: Tensor, columns: slice) -> Tensor:
        if not self.normalize:
            return x
        return ((x - params["mean"][..., columns]) / params["std"][..., columns]).clamp(-self.clip, self.clip)

    def prepare(self, params: dict[str, Any], rows: Tensor) -> Tensor:
        """mlp: the first layer's product with each bar's features, [K, S, H]; per_stock: each
        bar's features per stock (normalised), [K, 1 or S, N, F]."""
        chunk, width = rows.shape[0], self.width
        features = rows[:, width:]
        if self.normalize:  # every policy's own statistics: [K, S, NF]
            features = self._normalized(params, features.unsqueeze(1), slice(width, None))
        if self.trunk == "mlp":
            weight = params["first_features"]  # [NF, S, H] unnormalised, else [S, NF, H]
            if not self.normalize:  # one matrix product for every policy and bar
                return (features @ weight.reshape(weight.shape[0], -1)).reshape(chunk, *weight.shape[1:])
            return torch.bmm(features.transpose(0, 1), weight).transpose(0, 1)
        # per stock the features are few (F) and the encoder's output is S x N x H a bar: computed
        # ahead for a block of bars it would be hundreds of MB, so it is computed per bar
        return features.reshape(chunk, -1, self.num_stocks, self.num_features)  # [K, 1 or S, N, F]

    def decide(self, params: dict[str, Any], prepared: Tensor, bar: Any) -> Tensor:
        """Actions [S, N] of the S policies, row s by policy s."""
        account = self._normalized(params, bar.account, slice(0, self.width))
        out = (
            self._mlp(params, prepared, account) if self.trunk == "mlp" else self._per_stock(params, prepared, account)
        )
        out = out[:, : self.num_stocks]  # block 0 (the blocks are stock-major within each)
        if self.squash == "clamp":
            out = out.clamp(-1.0, 1.0)
        elif self.squash == "tanh":
            out = torch.tanh(out)
        return out.to(torch.float32)

    def _mlp(self, params: dict[str, Any], prepared: Tensor, account: Tensor) -> Tensor:
        weights, biases = params["weights"], params["biases"]
        x = prepared + _row_product(account, params["first_account"]) + biases[0]
        layer = 1
        for name in self.layers[1:]:
            if name == "linear":
                x = _row_product(x, weights[layer - 1]) + biases[layer]
                layer += 1
            else:
                x = _activate(x, name)
        return x

    def _per_stock(self, params: dict[str, Any], prepared: Tensor, account: Tensor) -> Tensor:
        activation = rational_tanh if self.layers[0] == "tanh" else torch.relu  # as `PerStockNet`
        weights, biases = params["weights"], params["biases"]  # layers after the encoder
        cash, positions = account[:, :1], account[:, 1:]
        features = prepared.expand(positions.shape[0], -1, -1)  # [S, N, F]
        encoded = torch.bmm(features, params["encoder_features"])  # [S, N, H]
        h = activation(encoded + positions.unsqueeze(-1) * params["encoder_position"] + params["encoder_bias"])
        head, width = weights[0], h.shape[-1]  # [S, 2H+1, O]
        context = h.mean(dim=1)  # [S, H]
        shared = torch.bmm(context.unsqueeze(1), head[:, width : 2 * width]) + cash.unsqueeze(-1) * head[:, 2 * width :]
        z = torch.bmm(h, head[:, :width]) + (shared + biases[0])  # [S, N, O]
        for weight, bias in zip(weights[1:], biases[1:], strict=True):
            z = torch.bmm(activation(z), weight) + bias
        return z.transpose(1, 2).reshape(z.shape[0], -1)  # [S, blocks x N], block j = output j


# tools/fit_tanh.py's output, the lowest power first
_TANH_NUMERATOR = (
    0.9999999067754761,
    0.13373198160800695,
    0.0034865797010758186,
    2.0471699357326595e-05,
    1.3183899028046397e-08,
)
_TANH_DENOMINATOR = (1.0, 0.4670649516243675, 0.025841977809111294, 0.0003271377482332696, 7.702558800053161e-07)
_TANH_CLAMP = 9.0


def rational_tanh(
    x: Tensor,
    numerator: Sequence[float] = _TANH_NUMERATOR,
    denominator: Sequence[float] = _TANH_DENOMINATOR,
    clamp: float = _TANH_CLAMP,
) -> Tensor:
    """tanh as ``x P(x^2) / Q(x^2)``, the input clamped to +-9: the per-stock networks' activation in a
    program, in place of the agents' ``2 sigmoid(2x) - 1`` (`trader.agents.networks.tanh`).

    Multiplications and one division, no exponential: compiled on the CPU, a year's backtest of 64
    per-stock policies (64 x 100 x 32 units a bar, twice) spent 69.0 s in the parent's shard against
    85.9 s with the sigmoid form (benchmarks/RESULTS.md, "The year's serial part"). P and Q are of
    degree 4, our own near-minimax fit (tools/fit_tanh.py, which prints them and the error). In
    float32 the largest error against tanh is 3.7e-7 (the sigmoid form's 1.8e-7, torch's tanh 3e-8),
    inside the tolerance the programs are held to (`act`'s actions, tests/test_rollout.py); near the
    clamp it may exceed 1 by two float32 steps (2.4e-7). The coefficients are the arguments'
    defaults; the fitting tool passes its own."""
    x = x.clamp(-clamp, clamp)
    x2 = x * x
    p = numerator[-1]
    for a in numerator[-2::-1]:
        p = p * x2 + a
    q = denominator[-1]
    for b in denominator[-2::-1]:
        q = q * x2 + b
    return x * p / q


def _row_product(x: Tensor, weight: Tensor) -> Tensor:
    """Each policy's one row through its layer: ``x`` [S, in], ``weight`` [S, out, in] (as `nn.Linear`
    holds it) -> [S, out], out[s, j] = sum_i x[s, i] weight[s, j, i].

    Written as a product and a sum over the contiguous axis, not as a `bmm` of one row: inductor
    fuses either into the chunk's kernel, but a `bmm` with the weights [S, in, out] became a
    reduction over the strided axis with one vector accumulator per 8 outputs, a chain of dependent
    additions per accumulator; over the contiguous axis it is a vectorised dot product per output,
    about twice as fast with 64 MLPs of 64 units over 100 tickers (benchmarks/RESULTS.md, "Backtest
    speed"). Eager, the product is materialised ([S, out, in]): the uncompiled chunk is a check."""
    return (x.unsqueeze(1) * weight).sum(-1)


def stack_params(program: PolicyProgram, params: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The params of several `PolicyProgram`s equal to `program` (S_1, S_2, ... policies) as one
    program's, their policies in order: the snapshots of a run, or checkpoints of one architecture,
    decided in one pass (`trader.backtest`)."""

    def join(key: str, tensors: Sequence[Tensor]) -> Tensor:
        return torch.cat(list(tensors), dim=_policies_axis(program, key))

    out: dict[str, Any] = {}
    for key, first in params[0].items():
        if isinstance(first, list):
            out[key] = [join(key, [p[key][i] for p in params]) for i in range(len(first))]
        else:
            out[key] = join(key, [p[key] for p in params])
    return out


def take_rows(program: PolicyProgram, params: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    """The params of policies [start, stop) of a program's stacked params (the inverse of `stack_params`):
    a backtest's shard of its policies' group, decided in a worker process of its own
    (`trader.backtesting.shards`). Contiguous copies, laid out as a program of their own holds them."""

    def rows(key: str, tensor: Tensor) -> Tensor:
        return tensor.narrow(_policies_axis(program, key), start, stop - start).contiguous()

    return {
        key: [rows(key, t) for t in value] if isinstance(value, list) else rows(key, value)
        for key, value in params.items()
    }


def _policies_axis(program: PolicyProgram, key: str) -> int:
    """The axis of the policies in a program's param `key`: 0, but 1 for an unnormalised flat MLP's
    features weights, laid out [NF, S, H] (`trunk_program`)."""
    return 1 if key == "first_features" and program.trunk == "mlp" and not program.normalize else 0


def _stack(tensors: Sequence[Tensor]) -> Tensor:
    return torch.stack([t.detach() for t in tensors]).contiguous()


def sequential_layers(module: nn.Module) -> tuple[str, ...] | None:
    """The layers of a flat MLP (`nn.Sequential` of `nn.Linear`, `nn.Tanh`, `nn.ReLU`,
    starting with a Linear), or None for any other module."""
    if not isinstance(module, nn.Sequential) or not len(module) or not isinstance(module[0], nn.Linear):
        return None
    names = []
    for layer in module:
        if isinstance(layer, nn.Linear):
            names.append("linear")
        elif type(layer) in _ACTIVATIONS:
            names.append(_ACTIVATIONS[type(layer)])
        else:
            return None
    return tuple(names)


def trunk_program(
    trunks: Sequence[nn.Module],
    obs_dim: int,
    act_dim: int,
    blocks: int = 1,
    squash: Squash = "none",
    normalize: bool = False,
    clip: float = 10.0,
) -> tuple[PolicyProgram, dict[str, Any]] | None:
    """The program and stacked params of S trunks of one architecture, or None when they
    are not all flat MLPs or all per-stock networks of the same shapes.

    A trunk maps a market observation [B, obs_dim] to [B, blocks x act_dim] outputs.
    `normalize`: the observations are normalised first (the caller adds the params ``mean``
    and ``std``, [S, obs_dim]); the features' weights are then laid out per policy."""

    def features_layout(weight: Tensor) -> Tensor:  # [S, in, H]: one matrix of every policy, or per policy
        return weight.contiguous() if normalize else weight.permute(1, 0, 2).contiguous()

    from trader.agents.networks import stock_layout
    from trader.errors import ConfigError

    try:
        stocks, features = stock_layout(obs_dim, act_dim)
    except ConfigError:
        return None
    width = 1 + stocks
    first = trunks[0]
    if isinstance(first, PerStockPolicyHead):
        first = first.net
    if isinstance(first, PerStockNet):
        nets = [t.net if isinstance(t, PerStockPolicyHead) else t for t in trunks]
        if any(not isinstance(n, PerStockNet) or n.num_nets != 1 or n.action_inputs for n in nets):
            return None
        shapes = [tuple(tuple(p.shape) for p in n.parameters()) for n in nets]
        if len(set(shapes)) != 1 or (n := nets[0]).num_stocks != stocks or n.num_features != features:
            return None
        activation = "tanh" if n.activation is tanh else "relu"
        encoder = _stack([net.weights[0][0] for net in nets])  # [S, 1+F, H]
        params = {
            "encoder_features": encoder[:, 1:].contiguous(),  # [S, F, H]
            "encoder_position": encoder[:, :1].contiguous(),  # [S, 1, H]
            "encoder_bias": _stack([net.biases[0][0] for net in nets]),  # [S, 1, H]
            "weights": [_stack([net.weights[i][0] for net in nets]) for i in range(1, len(n.weights))],
            "biases": [_stack([net.biases[i][0] for net in nets]) for i in range(1, len(n.biases))],
        }
        return PolicyProgram("per_stock", (activation,), stocks, features, blocks, squash, normalize, clip), params
    layers = [sequential_layers(t) for t in trunks]
    if layers[0] is None or len(set(layers)) != 1:
        return None
    linears = [[m for m in t if isinstance(m, nn.Linear)] for t in trunks]
    shapes = {tuple(tuple(m.weight.shape) for m in ls) for ls in linears}
    if len(shapes) != 1 or linears[0][0].in_features != obs_dim:
        return None
    first_weight = _stack([ls[0].weight.t() for ls in linears])  # [S, D, H]
    params = {  # the per-bar layers as `nn.Linear` holds them, [S, out, in] (`_row_product`)
        "first_account": first_weight[:, :width].transpose(1, 2).contiguous(),
        "first_features": features_layout(first_weight[:, width:]),
        "weights": [_stack([ls[i].weight for ls in linears]) for i in range(1, len(linears[0]))],
        "biases": [_stack([ls[i].bias for ls in linears]) for i in range(len(linears[0]))],
    }
    return PolicyProgram("mlp", layers[0], stocks, features, blocks, squash, normalize, clip), params


def agents_program(agents: Sequence[Any]) -> tuple[PolicyProgram, dict[str, Any]] | None:
    """The deterministic policies of S agents of one algorithm and architecture as one program
    (`Agent.act(obs, deterministic=True)`, row s by agent s), or None when they cannot be
    (an algorithm without a `deterministic_trunk`, other architectures, a non-market env)."""
    trunks = [getattr(agent, "deterministic_trunk", lambda: None)() for agent in agents]
    if not agents or any(t is None for t in trunks) or len({type(a) for a in agents}) != 1:
        return None
    agent = agents[0]
    if len({(a.obs_dim, a.act_dim, a.normalizer.enabled, a.normalizer.clip) for a in agents}) != 1:
        return None
    _, blocks, squash = trunks[0]
    normalize = agent.normalizer.enabled
    built = trunk_program(
        [t[0] for t in trunks], agent.obs_dim, agent.act_dim, blocks, squash, normalize, agent.normalizer.clip
    )
    if built is None:
        return None
    program, params = built
    if normalize:  # as `ObsNormalizer.normalize` computes them in float32
        dtype = torch.float32
        params["mean"] = torch.stack([a.normalizer.mean.to(dtype) for a in agents])
        params["std"] = torch.stack([torch.sqrt(a.normalizer.var + a.normalizer.eps).to(dtype) for a in agents])
    return program, params
