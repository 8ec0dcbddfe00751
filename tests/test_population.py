"""Pod groups' building blocks (issue 77): stacked networks, per-row Adam and random streams.

The property every test comes back to: a row is a lone pod. Its forward pass, gradient, Adam
step and random numbers are those of the same network alone, and nothing done to one row
reaches another."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats
from torch import nn

from market_envs.streams import RowStreams
from trader.agents.population import (
    RowAdam,
    clip_row_grad_norms,
    copy_rows,
    load_row_state,
    row_state,
    stack_sequentials,
)


def lone_mlp(seed: int, sizes=(7, 16, 16, 3)) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-2], sizes[1:-1], strict=True):
        layers += [nn.Linear(fan_in, fan_out), nn.Tanh()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def test_a_row_of_the_stack_is_its_lone_network_forward_and_backward():
    lones = [lone_mlp(seed) for seed in range(4)]
    stacked = stack_sequentials(lones)
    x = torch.randn(4, 32, 7)
    out = stacked(x)
    out.pow(2).sum().backward()
    for p, lone in enumerate(lones):
        expected = lone(x[p])
        torch.testing.assert_close(out[p], expected, rtol=0, atol=1e-6)
        expected.pow(2).sum().backward()
        for (name, param), (lone_name, lone_param) in zip(
            stacked.named_parameters(), lone.named_parameters(), strict=True
        ):
            assert name == lone_name
            torch.testing.assert_close(param.grad[p], lone_param.grad, rtol=1e-5, atol=1e-6)


def test_row_state_is_a_lone_networks_state_dict_and_loads_back():
    lones = [lone_mlp(seed) for seed in range(3)]
    stacked = stack_sequentials(lones)
    state = row_state(stacked, 2)
    lone_state = lones[2].state_dict()
    assert list(state) == list(lone_state)
    for name, value in lone_state.items():
        assert torch.equal(state[name], value)
    fresh = lone_mlp(9)
    fresh.load_state_dict(state)  # a pod's checkpoint loads into today's network
    load_row_state(stacked, 0, lones[1].state_dict())
    assert all(torch.equal(a, b) for a, b in zip(row_state(stacked, 0).values(), lones[1].state_dict().values()))
    with pytest.raises(KeyError):
        load_row_state(stacked, 0, {"0.weight": state["0.weight"]})


def test_row_adam_is_torch_adam_per_row_with_each_rows_rate():
    rates = torch.tensor([1e-3, 3e-2, 1e-4])
    lones = [lone_mlp(seed) for seed in range(3)]
    stacked = stack_sequentials(lones)
    optimiser = RowAdam(list(stacked.parameters()), rates, eps=1e-5)
    lone_optimisers = [
        torch.optim.Adam(lone.parameters(), lr=float(rate), eps=1e-5, fused=True)
        for lone, rate in zip(lones, rates, strict=True)
    ]
    generator = torch.Generator().manual_seed(0)
    for _ in range(25):  # the same gradients for both: Adam alone is compared
        for param in stacked.parameters():
            param.grad = torch.randn(param.shape, generator=generator)
        optimiser.apply()
        for p, (lone, lone_optimiser) in enumerate(zip(lones, lone_optimisers, strict=True)):
            for param, lone_param in zip(stacked.parameters(), lone.parameters(), strict=True):
                lone_param.grad = param.grad[p].clone()
            lone_optimiser.step()
    for p, lone in enumerate(lones):
        for name, value in lone.state_dict().items():
            assert torch.equal(row_state(stacked, p)[name], value), name  # bit for bit
        lone_state = lone_optimisers[p].state_dict()["state"]
        for index, values in optimiser.row_state(p).items():
            assert float(values["step"]) == float(lone_state[index]["step"]) == 25
            assert torch.equal(values["exp_avg"], lone_state[index]["exp_avg"])
            assert torch.equal(values["exp_avg_sq"], lone_state[index]["exp_avg_sq"])


def test_what_is_done_to_one_row_leaves_the_others_bit_for_bit():
    def run(perturb: bool) -> tuple[nn.Sequential, RowAdam]:
        stacked = stack_sequentials([lone_mlp(seed) for seed in range(3)])
        optimiser = RowAdam(list(stacked.parameters()), torch.tensor([1e-3, 1e-3, 1e-3]))
        if perturb:
            with torch.no_grad():
                stacked[0].weight[1].mul_(3.0)
            optimiser.lr[1] = 0.5
        generator = torch.Generator().manual_seed(1)
        for _ in range(10):
            x = torch.randn(3, 8, 7, generator=generator)
            if perturb:
                x[1] = x[1] * 100.0
            optimiser.zero_grad()
            stacked(x).pow(2).sum().backward()
            clip_row_grad_norms(list(stacked.parameters()), torch.tensor([0.5, 0.5, 0.5]))
            optimiser.apply()
        return stacked, optimiser

    plain, plain_adam = run(False)
    perturbed, perturbed_adam = run(True)
    for row in (0, 2):
        for name, value in row_state(plain, row).items():
            assert torch.equal(value, row_state(perturbed, row)[name]), name
        for index, values in plain_adam.row_state(row).items():
            assert torch.equal(values["exp_avg_sq"], perturbed_adam.row_state(row)[index]["exp_avg_sq"])
    assert not torch.equal(row_state(plain, 1)["0.weight"], row_state(perturbed, 1)["0.weight"])


def test_an_inactive_row_keeps_its_weights_moments_and_step():
    stacked = stack_sequentials([lone_mlp(seed) for seed in range(2)])
    optimiser = RowAdam(list(stacked.parameters()), torch.tensor([1e-2, 1e-2]))
    before = row_state(stacked, 1)
    stacked(torch.randn(2, 4, 7)).sum().backward()
    optimiser.apply(active=torch.tensor([True, False]))
    assert optimiser.step == [1, 0]
    assert all(torch.equal(before[name], value) for name, value in row_state(stacked, 1).items())
    assert all(float(values["exp_avg"].abs().sum()) == 0 for values in optimiser.row_state(1).values())
    assert not torch.equal(before["0.weight"], row_state(stacked, 0)["0.weight"])


def test_row_grad_clipping_is_clip_grad_norm_per_row():
    lones = [lone_mlp(seed) for seed in range(3)]
    stacked = stack_sequentials(lones)
    x = torch.randn(3, 8, 7) * torch.tensor([0.01, 1.0, 50.0]).view(3, 1, 1)
    stacked(x).pow(2).sum().backward()
    limits = torch.tensor([0.5, 0.5, 2.0])
    norms = clip_row_grad_norms(list(stacked.parameters()), limits)
    for p, lone in enumerate(lones):
        lone(x[p]).pow(2).sum().backward()
        norm = nn.utils.clip_grad_norm_(lone.parameters(), float(limits[p]))
        torch.testing.assert_close(norms[p], norm, rtol=1e-5, atol=0)
        for param, lone_param in zip(stacked.parameters(), lone.parameters(), strict=True):
            torch.testing.assert_close(param.grad[p], lone_param.grad, rtol=1e-5, atol=1e-7)


def test_row_grad_clipping_of_the_same_gradients_is_bit_for_bit():
    lones = [lone_mlp(seed) for seed in range(3)]
    stacked = stack_sequentials(lones)
    for p, lone in enumerate(lones):
        lone(torch.randn(8, 7) * (1.0 + 20 * p)).pow(2).sum().backward()
    for name, param in stacked.named_parameters():
        param.grad = torch.stack([dict(lone.named_parameters())[name].grad for lone in lones])
    norms = clip_row_grad_norms(list(stacked.parameters()), [0.5, 0.5, 3.0])
    for p, lone in enumerate(lones):
        assert torch.equal(norms[p], nn.utils.clip_grad_norm_(lone.parameters(), [0.5, 0.5, 3.0][p]))
        for param, lone_param in zip(stacked.parameters(), lone.parameters(), strict=True):
            assert torch.equal(param.grad[p], lone_param.grad)


def test_exploit_copies_a_row_weights_and_optimiser_state():
    stacked = stack_sequentials([lone_mlp(seed) for seed in range(3)])
    optimiser = RowAdam(list(stacked.parameters()), torch.tensor([1e-3, 2e-3, 3e-3]))
    stacked(torch.randn(3, 4, 7)).sum().backward()
    optimiser.apply(active=torch.tensor([True, False, True]))
    copy_rows(stacked, 0, 1)
    optimiser.copy_row(0, 1)
    assert all(torch.equal(a, b) for a, b in zip(row_state(stacked, 0).values(), row_state(stacked, 1).values()))
    assert optimiser.step == [1, 1, 1]
    assert optimiser.lr == pytest.approx([1e-3, 2e-3, 3e-3])  # the child's rate is its own


# --------------------------------------------------------------------------- random streams


def test_a_rows_stream_does_not_depend_on_the_other_rows():
    alone = RowStreams([7])
    group = RowStreams([3, 7, 11, 7])
    for _ in range(3):
        a, g = alone.normal((5, 2)), group.normal((5, 2))
        assert torch.equal(a[0], g[1]) and torch.equal(a[0], g[3])
        assert not torch.equal(g[0], g[1])
    assert torch.equal(alone.integers(10, (50,))[0], group.integers(10, (50,))[1])
    assert torch.equal(alone.permutations(64)[0], group.permutations(64)[1])
    assert torch.equal(group.take_rows([1]).uniform((9,))[0], group.uniform((9,))[1])


def test_stream_state_round_trips_and_draws_differ():
    streams = RowStreams([0, 1])
    first = streams.uniform((100,))
    state = streams.state_dict()
    second = streams.uniform((100,))
    assert not torch.equal(first, second)
    restored = RowStreams([5, 6])
    restored.load_state_dict(state)
    assert torch.equal(restored.uniform((100,)), second)


def test_stream_distributions_calibrate():
    streams = RowStreams(list(range(4)))
    uniform = streams.uniform((20_000,))
    assert float(uniform.min()) >= 0.0 and float(uniform.max()) < 1.0
    normal = streams.normal((20_000,))
    for row in range(4):
        assert stats.kstest(uniform[row].numpy(), "uniform").pvalue > 1e-3
        assert stats.kstest(normal[row].numpy(), "norm").pvalue > 1e-3
    # neighbouring seeds and neighbouring draws are uncorrelated
    corr = torch.corrcoef(normal)
    assert float((corr - torch.eye(4)).abs().max()) < 4.0 / math.sqrt(20_000)
    integers = streams.integers(torch.tensor([3, 10, 1, 7]), (30_000,))
    for row, high in enumerate((3, 10, 1, 7)):
        counts = torch.bincount(integers[row], minlength=high)
        assert len(counts) == high
        assert stats.chisquare(counts.numpy()).pvalue > 1e-3 if high > 1 else int(counts[0]) == 30_000
    permutations = streams.permutations(50)
    assert torch.equal(permutations.sort(dim=1).values, torch.arange(50).expand(4, 50))
    with pytest.raises(ValueError):
        streams.integers(0, (3,))


def test_a_row_off_the_alignment_computes_as_that_row_alone() -> None:
    """The CPU's matrix kernels round differently for data that starts off a 64-byte boundary:
    row 1 of a stack of 2 x 43 floats a row starts at 344 bytes. `aligned_rows` gives each row the
    alignment a tensor of that row alone has, so a stacked layer's row is that row's layer."""
    from trader.agents.population import StackedLinear, aligned_rows

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 43, generator=generator)
    layer = StackedLinear(torch.randn(3, 16, 43, generator=generator), torch.randn(3, 16, generator=generator))
    for row in range(3):
        alone = StackedLinear(layer.weight[row : row + 1].clone(), layer.bias[row : row + 1].clone())
        assert torch.equal(layer(x)[row], alone(x[row : row + 1].clone())[0])
    moved = aligned_rows(x)
    assert torch.equal(moved, x) and all(moved[row].data_ptr() % 64 == 0 for row in range(3))
    fits = torch.randn(3, 16, 4)  # 256 bytes a row: as it is
    assert aligned_rows(fits) is fits
