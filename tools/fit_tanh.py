"""Fit the rational tanh of the per-stock policy programs (`trader.agents.program.rational_tanh`).

    python tools/fit_tanh.py

tanh(x) ~ x P(x^2) / Q(x^2) on [0, CLAMP], P of degree 4, Q of degree 4 with Q(0) = 1, the input
clamped to +-CLAMP (tanh(9) = 1 - 3e-8, below float32's spacing at 1). The coefficients are the
near-minimax solution of the linearised problem min max |x P(t) - tanh(x) Q(t)| / |Q(t)|, t = x^2,
found by Lawson's iteratively reweighted least squares (each round a weighted `numpy.linalg.lstsq`
over 20,001 points, the weights multiplied by the last round's errors). Prints the coefficients and
the largest error of the float32 evaluation against float64 tanh on 2,000,001 points in [-12, 12].
"""

from __future__ import annotations

import numpy as np
import torch

DEGREE = 4
CLAMP = 9.0
ROUNDS = 60


def fit(degree: int = DEGREE, clamp: float = CLAMP, rounds: int = ROUNDS) -> tuple[np.ndarray, np.ndarray, float]:
    """(P's coefficients, Q's coefficients, the largest float64 error), lowest power first."""
    x = np.linspace(1e-6, clamp, 20_001)
    t, f = x * x, np.tanh(x)
    powers = t[:, None] ** np.arange(degree + 1)
    design = np.concatenate([x[:, None] * powers, -f[:, None] * powers[:, 1:]], axis=1)
    weight, q_last, best = np.ones_like(x), np.ones_like(x), None
    for _ in range(rounds):
        scale = np.sqrt(weight) / q_last
        solution, *_ = np.linalg.lstsq(design * scale[:, None], f * scale, rcond=None)
        p, q = solution[: degree + 1], np.concatenate([[1.0], solution[degree + 1 :]])
        q_values = powers @ q
        error = x * (powers @ p) / q_values - f
        largest = float(np.abs(error).max())
        if best is None or largest < best[2]:
            best = (p, q, largest)
        q_last, weight = np.abs(q_values), weight * np.abs(error)
        weight /= weight.sum()
    return best


def float32_error(p: np.ndarray, q: np.ndarray, clamp: float = CLAMP) -> float:
    """The largest error of the float32 evaluation (as `rational_tanh` computes it) against tanh."""
    from trader.agents.program import rational_tanh

    x = torch.linspace(-12.0, 12.0, 2_000_001, dtype=torch.float32)
    y = rational_tanh(x, tuple(p), tuple(q), clamp)
    return float((y.double() - torch.tanh(x.double())).abs().max())


if __name__ == "__main__":
    p, q, largest = fit()
    print("_TANH_NUMERATOR =", tuple(float(v) for v in p))
    print("_TANH_DENOMINATOR =", tuple(float(v) for v in q))
    print(f"largest error: float64 fit {largest:.2e}, float32 evaluation {float32_error(p, q):.2e}")
