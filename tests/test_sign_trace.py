"""benchmarks/sign_trace.py measures what it says: known answers for its sign measures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
N = 6


def _sign_trace():
    """The benchmark module (benchmarks/ is not a package), loaded once; it imports
    learning_check from its own folder."""
    if "sign_trace" in sys.modules:
        return sys.modules["sign_trace"]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("sign_trace", ROOT / "benchmarks" / "sign_trace.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sign_trace"] = module
    spec.loader.exec_module(module)
    return module


class Identity(nn.Module):
    def normalize(self, obs):
        return obs


class RuleAgent:
    """Acts ``sign x`` the rule's book (plus a common shift the trace must ignore); its
    critic is ``Q = sum_i a_i x critic_sign x rule_i``."""

    def __init__(self, actor_sign: float, critic_sign: float, rule_sign: float) -> None:
        self.actor_sign, self.critic_sign, self.rule_sign = actor_sign, critic_sign, rule_sign
        self.normalizer = Identity()

    def _rule(self, obs):
        stat = obs[:, 1 + N :]
        return self.rule_sign * (stat - stat.mean(dim=1, keepdim=True))

    def act(self, obs, deterministic=True):
        return (0.1 * self.actor_sign * self._rule(obs) + 0.3).clamp(-1, 1)

    def critic(self, obs, actions):
        return (actions * self.critic_sign * self._rule(obs)).sum(dim=1).unsqueeze(0).expand(2, -1)


def _probe(rows: int = 64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.cat([torch.rand(rows, 1 + N, generator=generator), torch.randn(rows, N, generator=generator)], dim=1)


def test_a_book_on_the_rule_scores_plus_one_and_its_mirror_image_minus_one():
    trace = _sign_trace()
    probe = _probe()
    direction = trace.rule_direction(probe, N, sign=-1.0)  # mean reversion
    follows = trace.trace_row(RuleAgent(1.0, 1.0, -1.0), probe, direction)
    mirror = trace.trace_row(RuleAgent(-1.0, -1.0, -1.0), probe, direction)
    for key in ("actor_corr", "critic_corr"):
        assert abs(follows[key] - 1.0) < 1e-9, key
        assert abs(mirror[key] + 1.0) < 1e-9, key
    assert follows["saturated"] == 0.0
    assert abs(follows["mean_abs_action"] - float(RuleAgent(1.0, 1.0, -1.0).act(probe).abs().mean())) < 1e-6


def test_the_critics_push_is_measured_apart_from_the_actor():
    trace = _sign_trace()
    probe = _probe()
    direction = trace.rule_direction(probe, N, sign=-1.0)
    row = trace.trace_row(RuleAgent(1.0, -1.0, -1.0), probe, direction)  # actor right, critic mirrored
    assert abs(row["actor_corr"] - 1.0) < 1e-9
    assert abs(row["critic_corr"] + 1.0) < 1e-9
