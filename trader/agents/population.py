"""P networks of one shape as one module, and an Adam with a rate and a step count per row.

The building blocks of a pod group (issue 77): P pods of one algorithm and network shape
trained side by side as one program. Their weights are stacked ``[P, ...]`` and each layer
is one batched matrix product (`StackedLinear`, ``torch.baddbmm``), the way fastpbrl
(Flajolet et al., ICML 2022) and PureJaxRL run populations: one kernel a layer for all the
pods instead of one per pod, which is what a small network needs, since a lone pod's
gradient step is mostly the cost of launching its kernels (benchmarks/pod_group_step.py).

A row is a pod, in the layout a lone pod holds. `stack_sequentials` builds the stacked
module from P ordinary ``nn.Sequential`` MLPs (each built and initialised as a lone pod
builds its own, from its own seed), and `row_state` gives row p's parameters under the
names and shapes of that ``nn.Sequential`` again: what a pod's checkpoint holds today, so
`trader backtest`, `trader act` and `trader paper` load a pod of a group alone.

`RowAdam` is Adam (Kingma and Ba) with each row's own learning rate and step count: the
rate is a hyperparameter a tournament perturbs per pod, and a child that takes a parent's
row takes its moments and step too (`copy_row`). `clip_row_grad_norms` clips each row's
gradient to its own global norm, as ``nn.utils.clip_grad_norm_`` does for one network.
Rows never mix: every operation here is elementwise or reduces within a row.
"""

from __future__ import annotations

import math
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from trader.errors import ConfigError

_ACTIVATIONS = (nn.Tanh, nn.ReLU)


class StackedLinear(nn.Module):
    """P linear layers of one shape: ``weight`` [P, out, in] and ``bias`` [P, out], as P
    ``nn.Linear`` hold theirs; ``x`` [P, B, in] -> [P, B, out], row p through layer p."""

    def __init__(self, weight: Tensor, bias: Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone().contiguous())
        self.bias = nn.Parameter(bias.detach().clone().contiguous())

    @classmethod
    def from_linears(cls, layers: Sequence[nn.Linear]) -> StackedLinear:
        return cls(torch.stack([m.weight.detach() for m in layers]), torch.stack([m.bias.detach() for m in layers]))

    def forward(self, x: Tensor) -> Tensor:
        x = aligned_rows(x)
        if self.weight.shape[1] == 1:  # a value head: the batched product's P = 1 path rounds otherwise
            return (x * self.weight).sum(dim=-1, keepdim=True) + self.bias.unsqueeze(1)
        return aligned_bmm(x, self.weight.transpose(1, 2)) + self.bias.unsqueeze(1)


ROW_ALIGNMENT = 64
"""Bytes: where each row of a batched product's input starts on the CPU (`aligned_rows`)."""


def aligned_rows(x: Tensor) -> Tensor:
    """``x`` [P, ...] with each row starting on a `ROW_ALIGNMENT`-byte boundary, as a freshly
    allocated tensor of one row does (on the CPU; elsewhere ``x`` itself).

    The CPU's matrix kernels round differently for data that starts off such a boundary (a row
    p > 0 of a stack whose rows are, say, 2 x 43 floats: 344 bytes), so without it row p of a
    stack would not be bit for bit the same row alone. A row of a size that is a multiple of the
    boundary is already aligned (the usual case: 16 sub-environments, a minibatch of 64); other
    sizes are copied once into a buffer with padded rows (a strided view, autograd through it)."""
    if x.device.type != "cpu" or x.ndim < 2:
        return x
    row_bytes = x[0].numel() * x.element_size()
    if x.is_contiguous() and row_bytes % ROW_ALIGNMENT == 0 and x.data_ptr() % ROW_ALIGNMENT == 0:
        return x
    per_row = x[0].numel()
    stride = -(-row_bytes // ROW_ALIGNMENT) * ROW_ALIGNMENT // x.element_size()
    padded = torch.nn.functional.pad(x.reshape(x.shape[0], per_row), (0, stride - per_row))  # a new, aligned tensor
    return padded[:, :per_row].view(x.shape)


def _aligned(shape: Sequence[int], element_size: int) -> bool:
    return math.prod(shape[1:]) * element_size % ROW_ALIGNMENT == 0


def _operand(x: Tensor) -> Tensor:
    """``x`` [P, m, k] itself where its rows start on aligned boundaries (a transposed weight's
    view too), else `aligned_rows` of it."""
    if x.data_ptr() % ROW_ALIGNMENT == 0 and x.stride(0) * x.element_size() % ROW_ALIGNMENT == 0:
        return x
    return aligned_rows(x.contiguous())


def _row_bmm(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm(a, b)`` with the rows of both inputs and of the result on aligned boundaries."""
    rows, m, n = a.shape[0], a.shape[1], b.shape[2]
    stride = -(-(m * n * a.element_size()) // ROW_ALIGNMENT) * ROW_ALIGNMENT // a.element_size()
    out = a.new_empty(rows, stride)[:, : m * n].view(rows, m, n)
    return torch.bmm(_operand(a), _operand(b), out=out)


class _AlignedBmm(torch.autograd.Function):
    """`_row_bmm` forward and backward (both gradients are batched products too)."""

    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(a, b)
        return _row_bmm(a, b)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        a, b = ctx.saved_tensors
        grad_a = _row_bmm(grad, b.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_b = _row_bmm(a.transpose(1, 2), grad) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b


def aligned_bmm(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm(a, b)`` [P, m, k] x [P, k, n] whose row p is bit for bit that row's product alone.

    On the CPU the matrix kernels round by where their operands and their result start, not only
    by their values: row p > 0 of a stack whose rows are not a multiple of `ROW_ALIGNMENT` bytes
    (a minibatch of 7 through 10 units: 280 bytes) starts off the boundary, and its product rounds
    otherwise than alone, in the forward pass or in the gradients' products. Where any of the three
    shapes' rows (a's, b's, the result's) is off the boundary, every product, forward and backward,
    reads aligned copies and writes an aligned buffer; elsewhere this is ``torch.bmm``."""
    if a.device.type != "cpu":
        return torch.bmm(a, b)
    shapes = (a.shape, b.shape, (a.shape[0], a.shape[1], b.shape[2]))
    if all(_aligned(shape, a.element_size()) for shape in shapes):
        return torch.bmm(_operand(a), _operand(b))
    return _AlignedBmm.apply(a, b)


def stack_sequentials(networks: Sequence[nn.Sequential]) -> nn.Sequential:
    """P flat MLPs of one shape (``nn.Linear`` and ``nn.Tanh`` / ``nn.ReLU`` layers) as one
    ``nn.Sequential`` of `StackedLinear` and the same activations, at the same indices (so
    its parameter names are theirs: ``0.weight``, ``2.bias``, ...)."""
    first = networks[0]
    layers: list[nn.Module] = []
    for index, layer in enumerate(first):
        if isinstance(layer, nn.Linear):
            same = [net[index] for net in networks]
            if any(not isinstance(m, nn.Linear) or m.weight.shape != layer.weight.shape for m in same):
                raise ValueError(f"stack_sequentials: layer {index} differs between the networks")
            layers.append(StackedLinear.from_linears(same))
        elif isinstance(layer, _ACTIVATIONS):
            if any(type(net[index]) is not type(layer) for net in networks):
                raise ValueError(f"stack_sequentials: activation {index} differs between the networks")
            layers.append(type(layer)())
        else:
            raise ValueError(
                f"stack_sequentials: layer {index} is a {type(layer).__name__}, not Linear or an activation"
            )
    if any(len(net) != len(first) for net in networks):
        raise ValueError("stack_sequentials: the networks have different depths")
    return nn.Sequential(*layers)


def row_state(module: nn.Module, row: int) -> dict[str, Tensor]:
    """Row ``row`` of a stacked module's parameters, under their names, without the P axis
    (a lone network's ``state_dict``); contiguous copies."""
    return {name: value.detach()[row].clone().contiguous() for name, value in module.state_dict().items()}


def load_row_state(module: nn.Module, row: int, state: dict[str, Tensor]) -> None:
    """Write a lone network's ``state_dict`` (`row_state`'s form) into row ``row``."""
    own = module.state_dict()
    if set(state) != set(own):
        raise KeyError(f"load_row_state: names differ: {sorted(set(state) ^ set(own))}")
    with torch.no_grad():
        for name, value in state.items():
            own[name][row].copy_(value)


class RowAdam:
    """Adam over stacked parameters [P, ...] with a learning rate and a step count per row.

    The update of row p is a lone pod's: torch's fused Adam (``torch.optim.Adam(...,
    fused=True)``, what `PPOAgent` and the off-policy agents run; no weight decay, no amsgrad)
    at learning rate ``lr[p]`` and step ``step[p]``, bit for bit, as one fused call over row p's
    views. One call per row, not one elementwise pass per operation over the whole stack: on the
    CPU a row's tensors stay in cache, and the stack's streamed through memory seven times ran
    6x slower at 16 market pods. Rows that are not ``active`` are left as they are, moments and
    step included (a pod that stopped early, PPO's ``target_kl``).

    Rates are host numbers, as torch's Adam keeps them; each row's step is a float32 tensor on
    the parameters' device, as fused Adam keeps it.

    :param params: the stacked parameters, each with the rows on axis 0.
    :param lr: each row's learning rate (P numbers; ``lr[p] = ...`` changes a row's rate).
    :param betas: Adam's decay rates, shared by the rows.
    :param eps: Adam's epsilon, shared.
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: Sequence[float] | Tensor,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params = list(params)
        rates = [float(rate) for rate in (lr.tolist() if isinstance(lr, Tensor) else lr)]
        rows = len(rates)
        if any(p.shape[0] != rows for p in self.params):
            raise ValueError(f"RowAdam: every parameter needs {rows} rows on axis 0, one per rate")
        self.lr = rates
        self.betas, self.eps = betas, float(eps)
        device = self.params[0].device
        self.steps = [torch.zeros((), dtype=torch.float32, device=device) for _ in range(rows)]
        """Each row's step count."""
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    @property
    def rows(self) -> int:
        return len(self.lr)

    @property
    def step(self) -> list[int]:
        """Each row's step count, on the host (one copy per row)."""
        return [int(step) for step in self.steps]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def apply(self, active: Sequence[bool] | Tensor | None = None) -> None:
        """One Adam step of every (active) row from the parameters' ``.grad`` (``active``, a bool
        tensor, is read on the host: one copy)."""
        beta1, beta2 = self.betas
        flags = [True] * self.rows if active is None else [bool(a) for a in _host_list(active)]
        if len(flags) != self.rows:
            raise ValueError(f"RowAdam.apply: active has {len(flags)} rows, the stack {self.rows}")
        trained = [i for i, param in enumerate(self.params) if param.grad is not None]
        for row in (row for row, on in enumerate(flags) if on):
            step = self.steps[row]
            step.add_(1)
            torch._fused_adam_(
                [self.params[i][row] for i in trained],
                [self.params[i].grad[row] for i in trained],
                [self.exp_avg[i][row] for i in trained],
                [self.exp_avg_sq[i][row] for i in trained],
                [],
                [step] * len(trained),
                amsgrad=False,
                lr=self.lr[row],
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=self.eps,
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )

    def row_state(self, row: int) -> dict[int, dict[str, Tensor]]:
        """Row ``row``'s moments and step, as ``torch.optim.Adam.state_dict()["state"]`` holds a lone
        network's (parameter index -> ``step``, ``exp_avg``, ``exp_avg_sq``)."""
        return {
            index: {"step": self.steps[row].clone(), "exp_avg": m[row].clone(), "exp_avg_sq": v[row].clone()}
            for index, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq, strict=True))
        }

    @torch.no_grad()
    def load_row_state(self, row: int, state: dict[int, dict[str, Tensor]], lr: float | None = None) -> None:
        """Write a lone network's Adam state (`row_state`'s form) into row ``row``; ``lr``, its rate."""
        for index, values in state.items():
            self.exp_avg[index][row].copy_(values["exp_avg"])
            self.exp_avg_sq[index][row].copy_(values["exp_avg_sq"])
        steps = {float(values["step"]) for values in state.values()}
        if len(steps) > 1:
            raise ValueError(f"RowAdam.load_row_state: the parameters are at different steps {sorted(steps)}")
        if steps:
            self.steps[row].fill_(steps.pop())
        if lr is not None:
            self.lr[row] = float(lr)

    @torch.no_grad()
    def copy_row(self, source: int, target: int) -> None:
        """Row ``target`` takes row ``source``'s moments and step (its rate stays its own)."""
        for m, v in zip(self.exp_avg, self.exp_avg_sq, strict=True):
            m[target].copy_(m[source])
            v[target].copy_(v[source])
        self.steps[target].copy_(self.steps[source])


def _host_list(values: Sequence[bool] | Tensor) -> list:
    return values.tolist() if isinstance(values, Tensor) else list(values)


@torch.no_grad()
def clip_row_grad_norms(params: Sequence[Tensor], max_norm: Sequence[float] | Tensor) -> Tensor:
    """Scale each row's gradient so that its global norm (over every parameter) is at most
    ``max_norm[p]``, as ``nn.utils.clip_grad_norm_`` does for one network (its operations, per
    row: each gradient's norm, the norm of those norms, the clamped scale); returns the norms [P]."""
    grads = [p.grad for p in params if p.grad is not None]
    rows = grads[0].shape[0]
    views = [g[row] for row in range(rows) for g in grads]  # row-major: row p's gradients together
    norms = torch.stack(torch._foreach_norm(views)).view(rows, len(grads))
    totals = torch.linalg.vector_norm(norms, dim=1)
    limits = torch.as_tensor(max_norm, dtype=totals.dtype, device=totals.device)
    scale = (limits / (totals + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view((-1,) + (1,) * (g.ndim - 1)))
    return totals


@torch.no_grad()
def copy_rows(module: nn.Module, source: int, target: int) -> None:
    """Row ``target`` of every parameter and buffer of a stacked module takes row ``source``'s
    (PBT's exploit inside a group: a child takes its parent's weights)."""
    for value in module.state_dict().values():
        value[target].copy_(value[source])


def config_key(config: Any, row_fields: Sequence[str]) -> tuple:
    """What pods must share to train as one group: every field of their (dataclass) config but
    ``row_fields``, the hyperparameters that may differ by row, as (name, value) pairs."""
    return tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config) if f.name not in row_fields)


def check_pods(
    agents: Sequence[Any], agent_cls: type, row_fields: Sequence[str], ungroupable: Callable[[Any], str | None]
) -> None:
    """Refuse, in one line (``ConfigError``), pods that cannot train as one group program: none, not
    ``agent_cls``, a config ``ungroupable`` refuses, another env shape or device, or a config that
    differs from the first pod's outside ``row_fields`` (the line names the fields)."""
    name = agent_cls.algo.upper()
    if not agents:
        raise ConfigError(f"a {name} group needs at least one pod")
    first = agents[0]
    for agent in agents:
        if not isinstance(agent, agent_cls):
            raise ConfigError(f"a {name} group trains {agent_cls.__name__}s, got {type(agent).__name__}")
        problem = ungroupable(agent.config)
        if problem is not None:
            raise ConfigError(problem)
        if (agent.obs_dim, agent.act_dim, agent.device) != (first.obs_dim, first.act_dim, first.device):
            raise ConfigError("the pods of a group need one env shape and one device")
        own, firsts = config_key(agent.config, row_fields), config_key(first.config, row_fields)
        if own != firsts:
            differ = [key for (key, a), (_, b) in zip(own, firsts, strict=True) if a != b]
            raise ConfigError(f"the pods of a {name} group differ in {', '.join(differ)}: only per-row fields may")
