"""Random streams keyed per row: P independent generators drawn from in one tensor program.

A pod group (issue 77) trains P pods side by side, and a pod must draw the same random
numbers whether it trains alone or beside 15 others, or a pod's result would depend on
its group. A ``torch.Generator`` per pod would need one call per pod each time anything
is drawn, a Python loop over pods inside every step. `RowStreams` is counter based
instead (the idea of Salmon et al.'s Philox, "Parallel random numbers: as easy as 1, 2,
3", SC 2011): value i of draw c of row p is a hash of ``(key[p], c, i)``, so one draw for
all rows is a handful of integer tensor operations, and row p's values depend on its own
key and the draw's number only, never on P or on the other rows.

The hash is SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom
number generators", OOPSLA 2014), a bijection of 64-bit integers with full avalanche,
computed in int64 with wrapping multiplication; logical right shifts are arithmetic
shifts masked. Uniforms take the top 24 bits (float32's mantissa); normals pair two
uniforms through Box-Muller. These are fine for exploration noise, sampling indices and
random starts; they are not a cryptographic source.

Every row advances together: a draw takes one counter for all rows, whatever shape it has,
so rows that run the same sequence of draws (the same code, as the pods of a group do) stay
in step. The counter is part of the state (`state_dict`), so a resumed run continues the
stream.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64
_MIX_1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MIX_2 = -7723592293110705685  # 0x94D049BB133111EB
_DRAW = 0x2545F4914F6CDD1D  # spreads the draw counter over the key space
_BITS = 24
_SCALE = 1.0 / (1 << _BITS)


def _shift_right(x: Tensor, bits: int) -> Tensor:
    """Logical right shift of int64 values (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _wrapped(value: int) -> int:
    """A Python integer as the int64 that wrapping arithmetic would hold."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def mix64(x: Tensor) -> Tensor:
    """SplitMix64's finaliser of int64 ``x`` (wrapping arithmetic), elementwise."""
    x = (x ^ _shift_right(x, 30)) * _MIX_1
    x = (x ^ _shift_right(x, 27)) * _MIX_2
    return x ^ _shift_right(x, 31)


def row_keys(seeds: Tensor | list[int]) -> Tensor:
    """Stream keys of rows from their seeds (int64 [P]): seeds 0, 1, 2 give unrelated keys."""
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    return mix64(seeds * _GOLDEN + _GOLDEN)


class RowStreams:
    """P random streams, one per row, drawn together (see the module docstring).

    :param seeds: one seed per row, int [P]; equal seeds give equal streams.
    :param device: where draws are made.
    """

    def __init__(self, seeds: Tensor | list[int], device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.seeds = tuple(int(seed) for seed in torch.as_tensor(seeds, dtype=torch.int64).tolist())
        """The rows' seeds (an env whose randomness is not these streams', a gymnasium env, seeds its
        rows' own generators from them)."""
        self.keys = row_keys(seeds).to(self.device)
        self.draws = 0
        """Draws made so far (the counter of the next one)."""

    @property
    def rows(self) -> int:
        return int(self.keys.shape[0])

    def bits(self, shape: tuple[int, ...], draw: int | None = None) -> Tensor:
        """Hashed int64 values [P, *shape], each row's from its own key; advances the counter.

        :param draw: the draw's number instead of the counter's (which then does not move): a
            draw is a function of its number alone, so a caller whose rows draw a varying number of
            times (a pod group's rows, each its own epochs) numbers each draw by what it is."""
        count = math.prod(shape)
        index = torch.arange(count, dtype=torch.int64, device=self.device)
        if draw is None:
            draw = self.draws
            self.draws += 1
        # the draw's key is mixed on the host (a CPU scalar): no copy to the device per draw
        key = int(mix64(torch.tensor(_wrapped(draw * _DRAW + 1), dtype=torch.int64)))
        values = mix64(mix64(self.keys.unsqueeze(1) ^ key) + index * _GOLDEN)
        return values.reshape(self.rows, *shape)

    def uniform(self, shape: tuple[int, ...]) -> Tensor:
        """Uniform float32 [P, *shape] in [0, 1), multiples of 2^-24."""
        return _shift_right(self.bits(shape), 64 - _BITS).to(torch.float32) * _SCALE

    def normal(self, shape: tuple[int, ...]) -> Tensor:
        """Standard normal float32 [P, *shape] (Box-Muller on two uniforms per value)."""
        pairs = _shift_right(self.bits((2, *shape)), 64 - _BITS).to(torch.float32)
        radius = torch.sqrt(-2.0 * torch.log((pairs[:, 0] + 1.0) * _SCALE))  # (0, 1]: no log(0)
        return radius * torch.cos((2.0 * math.pi * _SCALE) * pairs[:, 1])

    def integers(self, high: int | Tensor, shape: tuple[int, ...]) -> Tensor:
        """Integers int64 [P, *shape] in [0, high), ``high`` one bound for all rows or one per row
        [P]; by multiplication of 31 random bits (a bias below high / 2^31)."""
        if isinstance(high, Tensor):  # checked on the host: a per-row bound is a set-up value, not a per-step one
            if bool((high < 1).any()) or bool((high > 1 << 31).any()):
                raise ValueError(f"RowStreams.integers: high must be in 1..2^31, got {high.tolist()}")
        elif not 1 <= high <= 1 << 31:  # a Python bound (the env's, every step) needs no device sync
            raise ValueError(f"RowStreams.integers: high must be in 1..2^31, got {high}")
        high = torch.as_tensor(high, dtype=torch.int64, device=self.device)
        bound = high.reshape(-1, *([1] * len(shape))) if high.ndim else high
        return (_shift_right(self.bits(shape), 33) * bound) >> 31

    def permutations(self, length: int, draw: int | None = None) -> Tensor:
        """One random permutation of ``range(length)`` per row, int64 [P, length] (a sort of random
        keys); ``draw`` as `bits` takes it."""
        return torch.argsort(self.bits((length,), draw), dim=1)

    def state_dict(self) -> dict[str, Tensor]:
        return {"keys": self.keys.clone(), "draws": torch.tensor(self.draws, dtype=torch.int64)}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        keys = state["keys"].to(device=self.device, dtype=torch.int64)
        if keys.shape != self.keys.shape:
            raise ValueError(f"RowStreams: state holds {keys.shape[0]} rows, these streams {self.rows}")
        self.keys, self.draws = keys.clone(), int(state["draws"])

    def take_rows(self, rows: Tensor | list[int]) -> RowStreams:
        """The streams of some rows (a row's own stream, wherever it sits), at the same counter."""
        out = RowStreams([], self.device)
        out.keys = self.keys[torch.as_tensor(rows, dtype=torch.int64, device=self.device)].clone()
        out.draws = self.draws
        return out
