"""Evaluator: score snapshots with the deterministic policy; keep the best one.

An evaluation resets its own batched env with a fixed seed (every snapshot meets the
same episodes), runs ``agent.act(obs, deterministic=True)`` and records the *first*
episode of each of the E sub-environments: E episodes per evaluation. Per-step
rewards (and any requested ``info`` keys) are kept on the device as [T, E] tensors
with a mask of the steps inside each episode, and a pluggable score function turns
that `EpisodeRecord` into metrics, one of which is ``"score"`` (higher is better).

- `mean_return_score` (default; gymnasium envs): mean episodic return.
- `return_and_sharpe_score` (market envs): compounded return and annualised Sharpe
  of each episode's portfolio-value series, via `trader.metrics` (the functions the
  backtest uses), averaged over episodes.

Which snapshot is best is decided in one place, `BestSnapshot` (higher score wins, a NaN
score ranks lowest, the first snapshot is always kept): the evaluator keeps our agents'
best by it, and `trader.libraries.selection.Selection` the baseline libraries'. The
validation evaluator of every market run, ours and the baselines', is `market_evaluator`.

The loop is over time only; whether every episode has ended is checked on the host
once every ``check_every`` steps. A market validation env (`StockTradingVecEnv` in its
deterministic full-period mode, one sub-environment) with an agent whose deterministic
policy is a `trader.agents.program.PolicyProgram` takes `market_envs.rollout.Rollout`
instead: many bars per call (compiled with the env's step), no host sync, the same record
within float rounding (benchmarks/RESULTS.md, "Validation pass").
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from market_envs.env import StockTradingVecEnv
from market_envs.rollout import Rollout
from trader import metrics as trade_metrics
from trader.agents.base import Agent
from trader.agents.checkpoint import RNG_KEY, save_checkpoint
from trader.agents.parallel import clone_agent
from trader.errors import ConfigError, UserError


@dataclass(frozen=True)
class EpisodeRecord:
    """What one evaluation saw: the first episode of each of E sub-environments."""

    returns: Tensor
    """[E] undiscounted episodic return."""
    lengths: Tensor
    """[E] episode lengths in steps."""
    rewards: Tensor
    """[T, E] per-step rewards, 0 after an episode ended."""
    mask: Tensor
    """[T, E] bool, True on the steps that belong to each episode."""
    infos: dict[str, Tensor]
    """Recorded ``info`` values, each [T, E, ...] (the step's value, not masked)."""


ScoreFn = Callable[[EpisodeRecord], dict[str, float]]
"""Turns a record into metrics; the result must contain ``"score"`` (higher is better)."""


def mean_return_score(record: EpisodeRecord) -> dict[str, float]:
    """``score`` = mean episodic return; also its standard deviation and mean length."""
    returns = record.returns.double()
    stats = torch.stack([returns.mean(), returns.std(correction=0), record.lengths.double().mean()])
    mean, std, length = stats.cpu().tolist()
    return {"score": mean, "mean_return": mean, "std_return": std, "mean_length": length}


SCORES = ("sharpe", "return", "bar_sharpe")
"""What `return_and_sharpe_score` can make the ``score``."""


def return_and_sharpe_score(
    value_key: str = "portfolio_value",
    period: str = trade_metrics.DAILY,
    score_by: str = "sharpe",
    timestamps: Any = None,
    initial_value: float | None = None,
) -> MarketScore:
    """A score function for market envs from each episode's portfolio-value series.

    :param value_key: the ``info`` key holding the portfolio value [E] after each step
        (the evaluator must record it: ``record_info_keys=(value_key,)``).
    :param period: bar length for annualisation, one of `trader.metrics`' periods;
        ignored when ``timestamps`` are given.
    :param score_by: which metric becomes ``score``: ``"sharpe"`` (of the daily returns where
        ``timestamps`` are given), ``"return"``, or ``"bar_sharpe"`` (`trader.metrics.bar_sharpe_ratio`
        of the step returns; needs ``timestamps``). ``sharpe`` and ``return`` are always
        recorded, ``bar_sharpe`` wherever there are timestamps.
    :param timestamps: the bar time of each recorded step (step k ends at bar k+1 of
        a full-period validation env). When given, the step returns are compounded
        into daily returns before the Sharpe ratio, exactly as the backtest report
        computes it (`trader.metrics.summary`), and the first episode's daily returns
        are kept as the pass's trial record (`MarketScore.daily`).
    :param initial_value: the portfolio value at each episode's start (the env's
        initial cash). When given, the first step's return (from that value to the
        value after step 0) counts too, as in the backtest; without it the series
        starts at the second step.
    """
    if score_by not in SCORES:
        raise ConfigError(f"score_by must be one of {', '.join(map(repr, SCORES))}, got {score_by!r}")
    if score_by == "bar_sharpe" and timestamps is None:
        raise ConfigError("score_by='bar_sharpe' needs the bars' timestamps (to count the days)")
    return MarketScore(value_key, period, score_by, timestamps, initial_value)


@dataclass
class MarketScore:
    """The market score function (see `return_and_sharpe_score`, which builds it).

    After each call, ``daily`` holds the first episode's daily returns (a Series
    indexed by date; None without ``timestamps``): the evaluator records them as one
    trial of the run's selection (docs/reading-results.md)."""

    value_key: str
    period: str
    score_by: str
    timestamps: Any
    initial_value: float | None
    daily: pd.Series | None = None

    def __call__(self, record: EpisodeRecord) -> dict[str, float]:
        if self.value_key not in record.infos:
            raise ConfigError(f"evaluator did not record info['{self.value_key}'] needed by the score")
        values = record.infos[self.value_key].double().cpu().numpy()  # [T, E], once per evaluation
        mask = record.mask.cpu().numpy()
        returns = np.full(values.shape, np.nan)
        returns[1:] = values[1:] / values[:-1] - 1.0
        if self.initial_value is not None:  # every recorded episode starts at step 0
            returns[0] = values[0] / self.initial_value - 1.0
        returns[~mask] = np.nan
        returns[1:][~mask[:-1]] = np.nan
        total = _mean_of_defined(trade_metrics.cum_returns_final(returns))
        if self.timestamps is None:
            sharpe = _mean_of_defined(trade_metrics.sharpe_ratio(returns, period=self.period))
        else:
            steps = min(len(returns), len(self.timestamps))  # rows past the episode are masked
            daily = trade_metrics.daily_returns(returns[:steps], self.timestamps[:steps])
            sharpe = _mean_of_defined(trade_metrics.sharpe_ratio(daily.to_numpy(), period=trade_metrics.DAILY))
            bar_sharpe = _mean_of_defined(trade_metrics.bar_sharpe_ratio(returns[:steps], self.timestamps[:steps]))
            self.daily = daily.iloc[:, 0].rename(None)
        metrics = {"return": float(total), "sharpe": float(sharpe)}
        if self.timestamps is not None:
            metrics["bar_sharpe"] = float(bar_sharpe)
        metrics.update(mean_return_score(record))
        metrics["score"] = metrics[self.score_by]
        return metrics


def market_evaluator(
    data: Any, rules: Any, device: torch.device | str = "cpu", compile: bool = False, score_by: str = "bar_sharpe"
) -> Evaluator:
    """The validation evaluator of market runs: one deterministic pass over `data`
    (a `MarketData` period) under the env `rules`, scored by the Sharpe ratio of its bar
    returns (`trader.metrics.bar_sharpe_ratio`): on daily bars the daily Sharpe ratio every
    backtest report computes; on intraday bars the same mean over a spread measured from
    every bar, which ranks near-equal candidates (a tournament's pods, a run's snapshots)
    by their test Sharpe far better than 63 daily returns do (benchmarks/RESULTS.md,
    "Validation at the bar's resolution"). The pass records the daily Sharpe ratio too
    (``sharpe``) and keeps its daily returns as the trial's record. Baselines are selected
    by it too (`trader.baselines`), and a tournament's ensemble (`tournament.orchestrator`);
    ``score_by="sharpe"`` scores by the daily Sharpe ratio instead, where a published rule
    says so (FinRL's ensemble, `trader.libraries.finrl`).

    The pass is one env step per bar with a single sub-environment, so its time is the
    step's fixed overhead times the bars, whatever the number of tickers. ``compile``
    runs the step kernel through ``torch.compile``: the same scores, and once compiled
    a shorter pass (benchmarks/RESULTS.md, "Validation pass", measured by
    benchmarks/validation_pass.py)."""
    rules = replace(rules, random_start=False, episode_length=None)
    validation = StockTradingVecEnv(data, 1, device, rules, compile=compile)
    # Step k of the full-period validation env ends at bar k+1.
    score = return_and_sharpe_score(
        "value",
        trade_metrics.DAILY,
        score_by=score_by,
        timestamps=data.timestamps[1:],
        initial_value=rules.initial_cash,
    )
    return Evaluator(validation, score, max_steps=data.num_bars + 1, record_info_keys=("value",))


def rank_score(score: float | None) -> float:
    """A validation score as snapshots (and FinRL's window learners) are ranked by it:
    itself, but NaN or None (a Sharpe ratio over fewer than two days) ranks lowest."""
    return -math.inf if score is None or math.isnan(score) else float(score)


@dataclass
class BestSnapshot:
    """The best snapshot so far by validation score: the one rule every learner's
    snapshots are chosen by (ours in `Evaluator.consider`, the baseline libraries' in
    `trader.libraries.selection.Selection`).

    A higher ``score`` (`rank_score`) wins; an equal one keeps the earlier snapshot; a
    NaN score ranks lowest, but the first snapshot offered is always kept, so that a
    best checkpoint exists."""

    step: int | None = None
    """The training step of the best snapshot (None: none offered yet)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Its validation metrics, ``score`` among them, as measured (NaN kept)."""

    @property
    def score(self) -> float:
        """The best snapshot's score as ranked (-inf while none, or for a NaN score)."""
        return rank_score(self.metrics.get("score"))

    def offer(self, step: int, metrics: Mapping[str, float]) -> bool:
        """Keep the snapshot at ``step`` scored ``metrics`` if it is the best so far; True when kept."""
        if self.step is not None and not rank_score(metrics["score"]) > self.score:
            return False
        self.step, self.metrics = step, dict(metrics)
        return True


def _full_period_steps(env: Any) -> int | None:
    """The steps of a market env's deterministic full-period episode (the first bar to the
    last, every sub-environment alike), or None for any other env."""
    if isinstance(env, StockTradingVecEnv) and not env.config.random_start and env.config.episode_length is None:
        return env.num_bars - 1
    return None


def _mean_of_defined(values: Any) -> float:
    """Mean over the episodes whose figure is defined; NaN (no warning) when none is
    (a Sharpe ratio over a single day, say)."""
    values = np.asarray(values, dtype=float).ravel()
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if defined.size else math.nan


class Evaluator:
    """Scores snapshots on its own env and keeps the best.

    :param env: a batched env reserved for evaluation (the validation period for
        markets); its E sub-environments give E episodes per evaluation. An eager env is
        stepped in inference mode (its state and buffers become inference tensors): step it
        through the evaluator only.
    :param score_fn: `EpisodeRecord` -> metrics with ``"score"``.
    :param seed: the env is reset with this seed at every evaluation.
    :param max_steps: an evaluation whose episodes are not all over after this many
        steps raises ``UserError`` (an env without episode ends).
    :param check_every: steps between host checks of whether every episode ended.
    :param record_info_keys: ``info`` keys to record for the score function.
    """

    def __init__(
        self,
        env: Any,
        score_fn: ScoreFn = mean_return_score,
        seed: int = 10_000,
        max_steps: int = 100_000,
        check_every: int = 50,
        record_info_keys: Sequence[str] = (),
    ) -> None:
        if max_steps <= 0 or check_every <= 0:
            raise ConfigError("Evaluator: max_steps and check_every must be positive")
        self.env = env
        self.score_fn = score_fn
        self.seed = seed
        self.max_steps = max_steps
        self.check_every = check_every
        self.record_info_keys = tuple(record_info_keys)
        self.best = BestSnapshot()
        """The best snapshot's step and metrics (`BestSnapshot`: the rule that chooses it)."""
        self.best_state: dict[str, Tensor] | None = None
        self.trials: list[tuple[int, float, pd.Series]] = []
        """(step, score, daily returns) of every pass `consider` made, when the score
        function records daily returns (`MarketScore`): the trials behind the choice
        of the best snapshot."""
        self._best_agent: Agent | None = None
        self._best_rng: torch.Tensor | None = None

    def copy(self) -> Evaluator:
        """A fresh evaluator on the same env with the same rules (no best, no trials): a pod
        group's pods each keep their own."""
        score_fn = replace(self.score_fn) if is_dataclass(self.score_fn) else self.score_fn
        return Evaluator(
            self.env, score_fn, self.seed, self.max_steps, self.check_every, record_info_keys=self.record_info_keys
        )

    @property
    def best_score(self) -> float:
        """The best snapshot's score (-inf while none, or when its score was NaN)."""
        return self.best.score

    @property
    def best_step(self) -> int | None:
        return self.best.step

    @property
    def best_metrics(self) -> dict[str, float]:
        return self.best.metrics

    @torch.no_grad()
    def run_episodes(self, agent: Agent) -> EpisodeRecord:
        """Play the first episode of every sub-environment with the deterministic policy."""
        record = self._rollout_episode(agent)
        if record is not None:
            return record
        with torch.inference_mode():  # the eager pass is small ops: inference mode spares each some 15%
            return self._step_episodes(agent)

    def _step_episodes(self, agent: Agent) -> EpisodeRecord:
        env = self.env
        obs, _ = env.reset(seed=self.seed)
        running = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
        rewards, masks = [], []
        infos: dict[str, list[Tensor]] = {key: [] for key in self.record_info_keys}
        known = _full_period_steps(env)  # a known length needs no check (no host sync)
        for step in range(1, (known or self.max_steps) + 1):
            obs, reward, terminated, truncated, info = env.step(agent.act(obs, deterministic=True))
            masks.append(running)
            rewards.append(torch.where(running, reward, 0.0))
            for key in self.record_info_keys:
                infos[key].append(info[key])
            running = running & ~(terminated | truncated)
            if known is None and step % self.check_every == 0 and not bool(running.any()):
                break
        else:
            if known is None and bool(running.any()):
                raise UserError(f"evaluation episodes on {env!r} did not end within {self.max_steps} steps")
        reward_table, mask = torch.stack(rewards), torch.stack(masks)
        return EpisodeRecord(
            returns=reward_table.sum(dim=0),
            lengths=mask.sum(dim=0),
            rewards=reward_table,
            mask=mask,
            infos={key: torch.stack(values) for key, values in infos.items()},
        )

    def _rollout_episode(self, agent: Agent) -> EpisodeRecord | None:
        """`run_episodes` by `Rollout` (see the module docstring), or None where it does not apply."""
        from trader.agents.program import agents_program

        env = self.env
        if not (_full_period_steps(env) and env.num_envs == 1):
            return None
        built = agents_program([agent])
        if built is None:
            return None
        program, params = built
        # eager, in inference mode (the chunk's small operations, each spared some overhead): about
        # 15% less time than bar by bar (benchmarks/RESULTS.md, "Tournament scaling")
        with torch.inference_mode() if not env.compiled else contextlib.nullcontext():
            obs, _ = env.reset(seed=self.seed)
            rows = Rollout(env, program, record=("reward", *self.record_info_keys)).run(params, obs)
        rewards = rows.pop("reward")
        mask = torch.ones_like(rewards, dtype=torch.bool)  # one episode, from the first bar to the last
        return EpisodeRecord(
            returns=rewards.sum(dim=0), lengths=mask.sum(dim=0), rewards=rewards, mask=mask, infos=rows
        )

    def evaluate(self, agent: Agent) -> dict[str, float]:
        """Score ``agent`` now (does not change the best snapshot)."""
        return self.score(self.run_episodes(agent))

    def score(self, record: EpisodeRecord) -> dict[str, float]:
        """The metrics of one pass's record (``"score"`` among them)."""
        metrics = self.score_fn(record)
        if "score" not in metrics:
            raise ConfigError("the evaluator's score function returned no 'score'")
        return metrics

    def consider(self, agent: Agent, step: int, record: EpisodeRecord | None = None) -> tuple[dict[str, float], bool]:
        """Evaluate ``agent`` at training ``step`` (``record``: its pass, made elsewhere, a pod
        group's one pass, `GroupValidation`); keep its state if it is the best so far."""
        metrics = self.evaluate(agent) if record is None else self.score(record)
        if isinstance(self.score_fn, MarketScore) and self.score_fn.daily is not None:
            self.trials.append((step, float(metrics["score"]), self.score_fn.daily))
        improved = self.best.offer(step, metrics)
        if improved:
            self.best_state = agent.state_dict()
            self._best_rng = agent.generator.get_state()
            self._best_agent = agent
        return metrics, improved

    def restore(
        self,
        agent: Agent,
        best: tuple[int, Mapping[str, float], Mapping[str, Tensor]] | None,
        trials: Sequence[tuple[int, float, pd.Series]] = (),
    ) -> None:
        """Take up where an interrupted run's evaluator stopped (`trader.train`'s ``resume``):
        its best snapshot ``(step, metrics, flat checkpoint state)`` (None: none yet) and its
        trials; ``agent`` is the resumed agent (the template a best snapshot is cloned from)."""
        self.trials = list(trials)
        if best is None:
            return
        step, metrics, state = best
        state = dict(state)
        rng = state.pop(RNG_KEY, None)
        self.best = BestSnapshot(int(step), dict(metrics))
        self.best_state = state
        self._best_rng = None if rng is None else rng.cpu()
        self._best_agent = agent

    def best_agent(self) -> Agent:
        """A new agent holding the best snapshot's state."""
        if self.best_state is None or self._best_agent is None:
            raise UserError("no snapshot has been evaluated yet")
        best = clone_agent(self._best_agent)
        best.load_state_dict(self.best_state)
        if self._best_rng is not None:
            best.generator.set_state(self._best_rng)
        return best

    def save_best(
        self,
        path: str | os.PathLike[str],
        data_window: dict[str, Any] | None = None,
    ) -> tuple[Path, Path]:
        """Checkpoint the best snapshot, its step and metrics in the sidecar's ``info``."""
        info = {"step": self.best_step, "validation": self.best_metrics}
        return save_checkpoint(self.best_agent(), path, data_window=data_window, info=info)


class GroupValidation:
    """One validation pass of P pods' deterministic policies as one program (a pod group's).

    The pass runs `market_envs.rollout.Rollout` over a P-row copy of the evaluator's validation
    env (the market's full-period pass, one row per pod, the same data), row p deciding by pod
    p's policy (`trader.agents.program.agents_program`); `records` gives each pod its column as
    the `EpisodeRecord` its own evaluator's pass would make (within float rounding), for
    `Evaluator.consider`. Where the pods' policies cannot be one program (not a market env),
    each pod's evaluator runs its own pass.

    :param evaluator: the validation evaluator of one pod (its env and info keys).
    :param pods: P.
    """

    def __init__(self, evaluator: Evaluator, pods: int) -> None:
        self.evaluator, self.pods = evaluator, pods
        env = evaluator.env
        self.env = None
        if isinstance(env, StockTradingVecEnv) and _full_period_steps(env) and env.num_envs == 1:
            self.env = StockTradingVecEnv(env.data, pods, env.device, env.config, compile=env.compiled)

    @torch.no_grad()
    def records(self, agents: Sequence[Agent]) -> list[EpisodeRecord | None]:
        """Each pod's record of one pass (None for each where the pass is each pod's own)."""
        from trader.agents.program import agents_program

        if len(agents) != self.pods:
            raise ConfigError(f"GroupValidation: {len(agents)} agents for a pass of {self.pods} pods")
        built = None if self.env is None else agents_program(agents)
        if built is None:
            return [None] * self.pods
        program, params = built
        keys = self.evaluator.record_info_keys
        with torch.inference_mode() if not self.env.compiled else contextlib.nullcontext():
            obs, _ = self.env.reset(seed=self.evaluator.seed)
            rows = Rollout(self.env, program, record=("reward", *keys)).run(params, obs)
        rewards = rows.pop("reward")
        mask = torch.ones_like(rewards[:, :1], dtype=torch.bool)
        return [
            EpisodeRecord(
                returns=rewards[:, p : p + 1].sum(dim=0),
                lengths=mask.sum(dim=0),
                rewards=rewards[:, p : p + 1],
                mask=mask,
                infos={key: value[:, p : p + 1] for key, value in rows.items()},
            )
            for p in range(self.pods)
        ]
