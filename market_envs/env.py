"""`StockTradingVecEnv`: E trading sub-environments over N stocks, batched on one device.

Every piece of state is a tensor on the env's device (CPU or CUDA): the bar index
``t`` [E], the last bar of the episode ``end`` [E], ``cash`` [E], ``holdings`` [E, N]
and the portfolio value at the last close ``value`` [E]. A step is a fixed number of
tensor operations whatever E and N are: no Python loop over environments, stocks or
bars, no ``.item()`` and no host copy.

Timing, for one sub-environment at bar t (all prices from ``data``):

1. The agent sees the observation at bar t, built from data at bars <= t only. Its
   action becomes orders in shares (`_orders`; `target_holdings` as a function): in
   shares mode directly; in weights mode through an **aim** portfolio (`EnvConfig`:
   ``weights_map``), toward which the book, valued at bar t+1's open, moves through the
   no-trade band and at the trade rate (``no_trade_band``, ``band_scope``,
   ``trade_rate``; by default all the way: the book is rebalanced to the aim; with
   ``rate_action`` the policy chooses each stock's rate in a second action block). Each
   stock's new weight lies between its weight and its aim.
2. Its order fills at the **open of bar t+1**, never at a price it has already seen.
   A stock whose bar t+1 is not tradable (``data.tradable``) is not traded, but for
   a stock that has left a point-in-time index (``data.reducible`` at bar t+1): its
   position may only shrink, a long sold and a short covered down to zero at most
   (`toward_zero`).
3. With a participation cap (``EnvConfig.costs.participation``), at most that
   fraction of bar t+1's volume fills per stock; the rest of the order is dropped.
4. Sells settle first and their proceeds, less their costs, become cash; then the
   buys are paid. When the cash does not cover every buy plus its costs, all buys
   are scaled down by one common factor, so the result never depends on the order of
   the stocks (in ``shares`` mode the scaled buys are then rounded down to whole
   shares; see `market_envs.fill._buys_within_cash` for the factor when costs are
   not linear).
5. Costs (`market_envs.costs` states each rule): the commission (``buy_cost`` /
   ``sell_cost`` of the value, plus ``costs``' fee per share, minimum and cap per
   order), the half-spread and the square-root market impact, all paid in cash at the
   fill; then, at bar t+1's close, the borrow fee of the bar on the short notional.
   Cash never goes below 0 through a trade; only a borrow fee that the cash does not
   cover leaves it below 0 (a debt, repaid by the next sales), which needs short
   selling.
6. The reward is the change of the portfolio value marked at the close, from bar t
   to bar t+1, times ``reward_scale`` (``EnvConfig.reward="value"``, the default). With
   ``reward="aim"`` (weights mode) it is instead what the step's **aim** portfolio earns
   over bar t+1, ``value at the fill x sum_i aim_i x (close_i / open_i - 1)``, less every
   cost paid in the step, times ``reward_scale``: see `EnvConfig.reward`.

``info`` of a step, every entry [E] in the data's currency unless stated: ``t`` (bar
t+1), ``value``, ``cash``, ``holdings`` [E, N], ``turnover`` (value traded / value at
bar t's close), ``costs`` (all paid this step) and its parts ``cost_commission``,
``cost_spread``, ``cost_impact``, ``cost_borrow``; ``ordered_value`` (the orders at
the fill price, after the tradable mask and the guard, before the participation cap),
``unfilled_value`` and ``unfilled_shares`` (what the cap left unfilled; 0 without a
cap); ``final_obs``. Every cost-table row for bar t+1 is computed at construction from
bars <= t only ([T, N] tables, like the observation table); the participation cap
alone reads bar t+1's volume, which decides how much fills, never what is ordered.

Accounting runs in float64 (cash of 1e6 in float32 is only exact to 0.06), the
observations are float32.

Episodes and autoreset: an episode starts at bar ``start`` (random per
sub-environment when ``random_start``, else the first bar) and is **truncated** when
it reaches ``start + episode_length`` or the last bar of the data (a time limit, so
learners bootstrap from it). It is **terminated** only by ruin (value <= 0), which
needs short selling; without short selling ``terminated`` is always False. Autoreset
follows gymnasium's **same-step** mode (``AutoresetMode.SAME_STEP``): a finished
sub-environment restarts inside the same ``step``; the returned ``obs`` row is the
first observation of its new episode and ``info["final_obs"]`` holds the last
observation of the finished one (rows of unfinished sub-environments equal ``obs``).
``reward``, ``terminated``, ``truncated`` and every other ``info`` entry describe the
step just taken, before any reset; the ``cash`` and ``holdings`` attributes hold the
current state, after resets.

Observation layout, float32 [E, obs_dim] with obs_dim = 1 + N + N x F
(F = number of observed features: the panel's 13 by default, plus one per
``EnvConfig.return_windows`` entry):

- ``[0]``: cash / portfolio value at the close of bar t;
- ``[1 : 1 + N]``: holdings x close / portfolio value, per stock. Both lie in [0, 1]
  without short selling; with it they are clipped to ``[-feature_clip, feature_clip]``;
- ``[1 + N :]``: the normalised features at bar t, stock-major (stock 0's F
  features, then stock 1's, ...). Price-like features (open, high, low, close,
  boll_ub, boll_lb, close_30_sma, close_60_sma) are ``100 x log(x_t / close_{t-1})``
  (at a period's first bar, the close of the bar before it in the data, `MarketData.lookback`;
  at the data's very first bar its own close stands in), which needs no
  fitted statistics; volume is ``log1p(volume) - log1p(mean volume)``; the other
  indicators (macd, rsi_30, cci_30, dx_30) are standardised,
  ``(x - mean) / std``. Mean and std are ``data.feature_mean``/``feature_std`` (fitted
  on the training period by ``MarketData.split``); a panel without them is
  normalised with its own statistics (fine for a training panel; give validation and
  test panels the training statistics). Every feature is clipped to
  ``[-feature_clip, feature_clip]``. After the panel's features come the derived
  ``ret_tstat_{w}`` features of ``EnvConfig.return_windows`` (trailing-return
  t-statistics, see there; none by default). Every trailing window (the previous close, the
  t-statistics, the turbulence index, like the cost tables) reads the bars before the panel's
  first when it was cut from a longer one (`MarketData.lookback`), so a validation or test
  period, or a walk-forward fold, is observed from its first bar as a live trader sees it.
  The whole feature part is precomputed at construction as a [T, obs_dim] float32 table
  (T x obs_dim x 4 bytes on the device, so it grows with the bars, the stocks and the
  features observed; observe fewer ``features`` to shrink it), so a step gathers one row
  per sub-environment.

Speed: on the CPU, observations are written into buffers the env recycles once the
caller no longer references them (see `_RecyclingBuffers`); ``compile=True`` fuses
the accounting into a few loops (one pass over memory where eager makes one per
operation) and, with fewer temporaries, avoids most of the page faults that glibc's
malloc causes for large eager temporaries: on the CPU at large E prefer
``compile=True``. ``benchmarks/env_throughput.py`` measures both (benchmarks/RESULTS.md,
"Env throughput"). The fill (steps 3 to 5 but the borrow fee) is `market_envs.fill`, the one
home of every implementation of it, which the step calls through `fill_orders`: with a term
of `CostModel` on, the C kernel on the CPU (built once per machine; eager and compiled
alike), elsewhere a torch kernel, eager or for torch.compile (the same rules, arranged for
each; tests/test_native_fill.py holds all three equal).
``env_throughput.py --compare-costs`` measures what they cost against the flat rate
(benchmarks/RESULTS.md, "Costs in the env step").
"""

from __future__ import annotations

import functools
import math
import sys
import types
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from torch import Tensor

from market_envs.costs import (
    TRADING_DAYS,
    CostModel,
    bars_per_day,
    check_costs_for_data,
)
from market_envs.data.indicators import trailing_tstat
from market_envs.devices import resolve_device
from market_envs.data.panel import MarketData
from market_envs.errors import ConfigError, UserError
from market_envs.fill import dot, fill_costs, fill_orders, within_cash
from market_envs.fill_inputs import FillRules, Market, fill_rules, market_tables
from market_envs.native_fill import read_actions_c, reads_actions_natively

PRICE_LIKE_FEATURES = frozenset({"open", "high", "low", "close", "boll_ub", "boll_lb", "close_30_sma", "close_60_sma"})
ACTION_MODES = ("shares", "weights")
WEIGHTS_MAPS = ("normalized", "linear")
BAND_SCOPES = ("stock", "book")
REWARDS = ("value", "aim")
LINEAR_WEIGHT_SCALE = 2.0
"""``weights_map="linear"``: an action of +-1 asks for this many times ``max_leverage / N`` of the
value in one stock. 2, so that the planted rules' rank weights (at most sqrt(3) / N of a gross-1
book, `market_envs.data.edge.score_grid`) lie inside the action box."""


@dataclass(frozen=True)
class EnvConfig:
    """How the market env trades, pays and rewards.

    :param initial_cash: cash at the start of every episode, in the data's currency.
    :param action_mode: ``"shares"`` (FinRL-compatible): the order for each stock is
        ``trunc(action x max_shares)`` whole shares, positive buys, negative sells
        (rounded toward zero, so |action| < 1/max_shares is no order); sells are capped
        at the shares held (without short selling). ``"weights"``: the action is a
        target portfolio, rebalanced at the fill price in **fractional** shares.
        Long only: ``w = clip(a, 0, 1)``, divided by ``sum(w)`` when that exceeds 1;
        the rest ``1 - sum(w)`` stays in cash (so all-zero actions mean all cash).
        With short selling: ``w = a / max(1, sum |a| / max_leverage)`` (gross exposure
        at most ``max_leverage``). That book is the **aim** of the step; with the defaults
        (``weights_map="normalized"``, ``trade_rate=1``, ``no_trade_band=0``) the book is
        rebalanced to it in full, today's and FinRL's rule; `weights_map`, `trade_rate` and
        `no_trade_band` change how the action becomes the aim and how far the book moves.
    :param market_neutral: weights mode with short selling: the actions are first
        demeaned across the stocks, ``a - mean(a)``, so every target portfolio is
        dollar-neutral (no net market exposure), as a cross-sectional strategy is.
    :param max_shares: shares mode: the largest order per stock and step (FinRL's hmax).
    :param buy_cost: commission rate on the value bought (0.001 = 0.1%), paid in cash.
    :param sell_cost: commission rate on the value sold, deducted from the proceeds.
    :param costs: every other cost and fill term (`market_envs.costs.CostModel`: commission
        per share, minimum and cap, half-spread, square-root market impact,
        participation cap, borrow fee); the default charges none of them. A TOML table or
        dict is accepted and read by `CostModel.from_mapping`.
    :param max_leverage: weights mode with short selling: the largest gross exposure
        ``sum |w|`` of a target portfolio, as a multiple of the portfolio value. There is
        no margin loan (cash never goes below 0 through a trade), so exposure above 1
        comes from short sales funding longs; above 1 needs ``short_selling=True`` and
        weights mode.
    :param weights_map: weights mode: how an action becomes the aim portfolio.
        ``"normalized"`` (today's mapping): the formulas above, which rescale any action
        with ``sum |a| > max_leverage`` to gross ``max_leverage``, so the aim's size does not
        depend on the action's (exploration noise of any size becomes a book of full gross).
        ``"linear"``: ``w = a x linear_scale x max_leverage / N`` (after demeaning when
        market-neutral; long only ``clip(a, 0, 1)`` instead of ``a``), then divided by
        ``max(1, sum |w| / max_leverage)``: the aim grows with the action, so small noise
        is a small book and a policy can learn to shrink it.
    :param linear_scale: ``weights_map="linear"``: the aim of an action of +-1 in one stock, in
        units of ``max_leverage / N`` (default `LINEAR_WEIGHT_SCALE`). A larger scale makes the
        same policy output a larger book (and its exploration noise a larger one too); > 0.
    :param trade_rate: weights mode: the share kappa in [0, 1] of the way from the current
        book to the aim that each step trades (partial adjustment, Garleanu and Pedersen
        2013): ``w' = w + kappa x (aim - w)``, weights at the fill price. 1 trades all the
        way; 0 never trades.
    :param no_trade_band: weights mode: a no-trade band b >= 0 around the current book,
        in weight (a fraction of the portfolio value; Davis and Norman 1990). Per stock
        (``band_scope="stock"``): a stock whose aim is within b of its weight is not
        traded; one further away is traded **to the band's edge**, ``aim -+ b``, not to
        the aim. Whole book (``"book"``): no trade while ``sum |aim - w| <= b``; beyond it
        every stock moves toward its aim until ``sum |aim - w'| = b``. Applied before the
        rate: ``w' = w + kappa x band(aim - w)``. So each stock's new weight lies between
        its weight and its aim: nothing is bought or sold past the aim.
    :param band_scope: ``"stock"`` or ``"book"``, see `no_trade_band`.
    :param rate_action: weights mode: the policy chooses the trade rate, per stock and per step,
        instead of the fixed `trade_rate` (which must stay 1). The action then has 2N entries in
        two blocks, ``[a_1 .. a_N | r_1 .. r_N]``: the aims' actions, mapped by `weights_map` as
        always, and one rate action per stock, mapped to the rate
        ``kappa_i = ((1 + r_i) / 2)^2`` in [0, 1] (`policy_rates`), so stock i moves
        ``w_i' = w_i + kappa_i x band(aim_i - w_i)``. The blocks are what the per-stock network's
        outputs per stock give (`trader.agents.networks.PerStockPolicyHead`). The map is bounded
        and reaches both ends exactly on the action box: r = -1 never trades (the book and its
        costs stay as they are), r = +1 trades all the way to the aim (today's fill). A sigmoid of
        the clipped action could reach neither end (sigmoid(+-1) is 0.27 and 0.73); the square
        spends more of the box on small rates, where trading under costs lives (the oracle's
        0.02 is r = -0.72, away from the clip at -1, where half a Gaussian's samples would sit).
        Per stock rather than one rate for the book: each stock's costs differ (its spread, its
        volume and volatility behind the impact and the participation cap), and the per-stock
        network reads and decides each stock alone; a book rate would need an output that no
        stock owns. The reward is unchanged (`reward`); under ``reward="aim"`` the rate changes
        only the costs paid, so a learner is pushed toward rate 0 (the aim's return is credited
        whatever the book holds): pair it with ``reward="value"``.
    :param reward_scale: reward = change of portfolio value x this (1e-4 as in FinRL).
    :param reward: ``"value"``: the change of the portfolio value (the default; the
        backtest's measure). ``"aim"`` (weights mode): a training reward that credits each
        action with its own effect when the book moves toward the aim slowly: the return
        of bar t+1 (fill to close) on the aim portfolio, at the value at the fill, less the
        costs paid in the step (all terms, borrow included). Under a trade rate kappa the
        book is an average of recent aims, so its profit over time is about the aims'
        profit, lagged: the aim's own return credits an action at once, while the change
        of value mixes in the positions that earlier actions built (at kappa = 0.05, 95% of
        the position, and of its noise, is not this action's). With it a discount of 0
        still values a position that pays its cost now and earns later: an aim away from
        the book pays ``kappa x cost`` per step while the book converges and earns the
        aim's return every step it is held.
    :param episode_length: steps per episode; None runs to the end of the data. An
        episode that would pass the last bar is truncated there.
    :param random_start: True: each (re)start draws the first bar uniformly among
        those that leave a full ``episode_length`` before the end of the data (with
        ``episode_length=None``: any bar but the last, the episode then running to the
        end of the data). False: every sub-environment starts at the first bar (the
        deterministic full-period mode of the backtest engine).
    :param short_selling: allow negative holdings. Shares mode: a position may go down
        to ``-max_shares``; weights mode: negative target weights. Cash never goes
        negative; a portfolio value <= 0 terminates the episode (ruin).
    :param turbulence_threshold: optional causal risk guard (FinRL's turbulence
        index): when the turbulence of bar t exceeds this, the order decided at t is
        replaced by "sell every long position, buy nothing". None disables it.
    :param turbulence_window: bars of past returns behind the turbulence index: the
        Mahalanobis distance of bar t's returns from the mean and covariance of bars
        t-window .. t-1, the bars before a period's first among them (`MarketData.lookback`);
        0 for the data's first ``window`` bars.
    :param features: panel features to observe, in this order; None observes all of
        ``data.feature_names`` but those the data cannot supply (close-only data:
        `MarketData.unavailable_features`). Fewer features give a smaller, faster
        observation.
    :param feature_clip: normalised features are clipped to [-feature_clip, feature_clip].
    :param return_windows: derived features observed after the panel's, one per
        window w, named ``ret_tstat_{w}``: the t-statistic of each stock's last w
        close-to-close log returns, ``sum(r) / sqrt(sum(r^2))`` over bars t-w+1 .. t
        (closes up to bar t only, the bars before a period's first among them:
        `MarketData.lookback`; 0 until the data holds w returns). A scale-free trailing
        return, the usual input of momentum and reversal signals, which the panel's
        single-bar indicators do not carry. ``()`` observes none.
    """

    initial_cash: float = 1_000_000.0
    action_mode: Literal["shares", "weights"] = "shares"
    max_shares: int = 100
    buy_cost: float = 0.001
    sell_cost: float = 0.001
    reward_scale: float = 1e-4
    reward: Literal["value", "aim"] = "value"
    episode_length: int | None = None
    random_start: bool = True
    short_selling: bool = False
    market_neutral: bool = False
    turbulence_threshold: float | None = None
    turbulence_window: int = 240
    features: tuple[str, ...] | None = None
    feature_clip: float = 10.0
    return_windows: tuple[int, ...] = ()
    costs: CostModel = CostModel()
    max_leverage: float = 1.0
    weights_map: Literal["normalized", "linear"] = "normalized"
    linear_scale: float = LINEAR_WEIGHT_SCALE
    trade_rate: float = 1.0
    no_trade_band: float = 0.0
    band_scope: Literal["stock", "book"] = "stock"
    rate_action: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.costs, Mapping):
            object.__setattr__(self, "costs", CostModel.from_mapping(self.costs))
        if not isinstance(self.costs, CostModel):
            raise ConfigError(
                f"EnvConfig.costs must be a CostModel or a table of its keys, got {type(self.costs).__name__}"
            )
        if not (math.isfinite(self.initial_cash) and self.initial_cash > 0):
            raise ConfigError(f"EnvConfig.initial_cash must be a positive number, got {self.initial_cash}")
        if self.action_mode not in ACTION_MODES:
            raise ConfigError(f"EnvConfig.action_mode must be one of {ACTION_MODES}, got {self.action_mode!r}")
        if int(self.max_shares) != self.max_shares or self.max_shares < 1:
            raise ConfigError(f"EnvConfig.max_shares must be a positive integer, got {self.max_shares}")
        for key in ("buy_cost", "sell_cost"):
            rate = getattr(self, key)
            if not (0.0 <= rate < 1.0):
                raise ConfigError(f"EnvConfig.{key} must be in [0, 1), got {rate}")
        if not math.isfinite(self.reward_scale):
            raise ConfigError(f"EnvConfig.reward_scale must be finite, got {self.reward_scale}")
        if self.reward not in REWARDS:
            raise ConfigError(f"EnvConfig.reward must be one of {REWARDS}, got {self.reward!r}")
        if self.reward == "aim" and self.action_mode != "weights":
            raise ConfigError("EnvConfig.reward='aim' needs action_mode='weights' (it rewards the aim portfolio)")
        length = self.episode_length
        if length is not None and (int(length) != length or length < 1):
            raise ConfigError(f"EnvConfig.episode_length must be a positive integer or None, got {self.episode_length}")
        if self.turbulence_threshold is not None and not self.turbulence_threshold > 0:
            raise ConfigError(
                f"EnvConfig.turbulence_threshold must be positive or None, got {self.turbulence_threshold}"
            )
        if self.turbulence_window < 2:
            raise ConfigError(f"EnvConfig.turbulence_window must be at least 2, got {self.turbulence_window}")
        if isinstance(self.return_windows, (str, int)) or any(int(w) != w or w < 2 for w in self.return_windows):
            raise ConfigError(
                f"EnvConfig.return_windows must be a tuple of integers >= 2 (bars), got {self.return_windows!r}"
            )
        object.__setattr__(self, "return_windows", tuple(int(w) for w in self.return_windows))
        if len(set(self.return_windows)) != len(self.return_windows):
            raise ConfigError(f"EnvConfig.return_windows lists a window twice: {self.return_windows}")
        if self.features is not None:
            if isinstance(self.features, str):
                raise ConfigError(f"EnvConfig.features must be a tuple of names or None, got {self.features!r}")
            object.__setattr__(self, "features", tuple(self.features))
            if not self.features and not self.return_windows:
                raise ConfigError("EnvConfig.features is empty and there are no return_windows: nothing to observe")
        if not self.feature_clip > 0:
            raise ConfigError(f"EnvConfig.feature_clip must be positive, got {self.feature_clip}")
        if self.market_neutral and not (self.action_mode == "weights" and self.short_selling):
            raise ConfigError("EnvConfig.market_neutral needs action_mode='weights' with short_selling=True")
        if isinstance(self.max_leverage, bool) or not (math.isfinite(self.max_leverage) and self.max_leverage > 0):
            raise ConfigError(f"EnvConfig.max_leverage must be a positive number, got {self.max_leverage!r}")
        if self.max_leverage != 1.0 and not (self.action_mode == "weights" and self.short_selling):
            raise ConfigError(
                f"EnvConfig.max_leverage={self.max_leverage} needs action_mode='weights' with short_selling=True "
                "(there is no margin loan: a long-only book cannot exceed 1)"
            )
        self._check_aim_rules()

    def _check_aim_rules(self) -> None:
        """`weights_map`, `trade_rate`, `no_trade_band` and `band_scope`: values and mode."""
        if self.weights_map not in WEIGHTS_MAPS:
            raise ConfigError(f"EnvConfig.weights_map must be one of {WEIGHTS_MAPS}, got {self.weights_map!r}")
        if self.band_scope not in BAND_SCOPES:
            raise ConfigError(f"EnvConfig.band_scope must be one of {BAND_SCOPES}, got {self.band_scope!r}")
        rate, band = self.trade_rate, self.no_trade_band
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise ConfigError(f"EnvConfig.trade_rate must be a number in [0, 1], got {rate!r}")
        if isinstance(band, bool) or not isinstance(band, (int, float)) or not (math.isfinite(band) and band >= 0):
            raise ConfigError(f"EnvConfig.no_trade_band must be a number >= 0 (a weight), got {band!r}")
        object.__setattr__(self, "trade_rate", float(rate))
        object.__setattr__(self, "no_trade_band", float(band))
        scale = self.linear_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
            raise ConfigError(f"EnvConfig.linear_scale must be a number > 0, got {scale!r}")
        object.__setattr__(self, "linear_scale", float(scale))
        if self.linear_scale != LINEAR_WEIGHT_SCALE and self.weights_map != "linear":
            raise ConfigError("EnvConfig.linear_scale sizes the linear aim: it needs weights_map='linear'")
        if not isinstance(self.rate_action, bool):
            raise ConfigError(f"EnvConfig.rate_action must be true or false, got {self.rate_action!r}")
        if self.rate_action and self.action_mode != "weights":
            raise ConfigError(
                "EnvConfig.rate_action (a trade rate the policy chooses) needs action_mode='weights': "
                "shares mode has no aim to trade toward"
            )
        if self.rate_action and self.trade_rate != 1.0:
            raise ConfigError(
                f"EnvConfig.rate_action: the policy chooses the trade rate, so trade_rate must stay 1, "
                f"got {self.trade_rate:g}"
            )
        if self.action_mode == "shares" and not self.rebalances_in_full:
            raise ConfigError(
                "EnvConfig: weights_map, trade_rate and no_trade_band move a book of target weights; "
                "they need action_mode='weights' (shares mode orders shares directly)"
            )

    @property
    def rebalances_in_full(self) -> bool:
        """True for today's mapping: the action is the book, rebalanced in full every step."""
        return (
            self.weights_map == "normalized"
            and self.trade_rate == 1.0
            and self.no_trade_band == 0.0
            and not self.rate_action
        )

    @property
    def actions_per_stock(self) -> int:
        """Entries of the action per stock: 2 with `rate_action` (an aim and a rate), else 1."""
        return 2 if self.rate_action else 1


class _Tables(NamedTuple):
    """Per-bar data the step reads, precomputed on the device at construction."""

    open: Tensor  # [T, N] fill prices, the panel's float32 (widened to float64 exactly in the step)
    close: Tensor  # [T, N] mark prices, likewise
    tradable: Tensor  # bool [T, N]
    obs: Tensor  # float32 [T, obs_dim]; columns [0, 1+N) are zero, filled per step
    guard: Tensor  # bool [T], turbulence guard on (all False when disabled)
    market: Market  # the cost terms' tables, [T, N] (None: term off; `market_envs.fill_inputs.market_tables`)
    # the trade rate and the no-trade band of each sub-environment, float64 [E, 1] (None: off)
    trade_rate: Tensor | None = None
    band: Tensor | None = None
    reducible: Tensor | None = None  # bool [T, N]: `MarketData.reducible` (None: the panel has no leaver)


PER_ENV_TABLES = frozenset({"trade_rate", "band"})
"""The fields of `_Tables` with one row per sub-environment, [E, 1]; every other table has one
row per bar, [T, ...] (or one row for every bar, [1, N])."""


class _State(NamedTuple):
    """The state of E sub-environments; a step returns a new one."""

    t: Tensor  # int64 [E], bar of the last observation
    end: Tensor  # int64 [E], bar at which the episode is truncated
    cash: Tensor  # float64 [E]
    holdings: Tensor  # float64 [E, N]
    value: Tensor  # float64 [E], cash + holdings x close[t]


@dataclass(frozen=True)
class _Rules:
    """The constants of the step kernel (static under torch.compile)."""

    weights_mode: bool
    max_shares: float
    reward_scale: float
    initial_cash: float
    short_selling: bool
    market_neutral: bool
    account_low: float  # bounds of the cash and position shares in the observation
    account_high: float
    max_leverage: float = 1.0
    borrow_per_bar: float = 0.0  # the annual borrow rate x the bar's fraction of a year
    linear_weights: float = 0.0  # weights_map="linear": the aim is the action x this (else 0: "normalized")
    has_rate: bool = False  # a trade rate below 1 (`_Tables.trade_rate`)
    has_band: bool = False  # a no-trade band (`_Tables.band`)
    book_band: bool = False  # the band bounds sum |aim - w| (else each |aim_i - w_i|)
    rate_action: bool = False  # the actions' second block holds each stock's trade rate (`policy_rates`)
    aim_reward: bool = False  # EnvConfig.reward == "aim"
    leavers: bool = False  # the panel has bars where a position may only shrink (`_Tables.reducible`)
    fill: FillRules = FillRules()  # the fill's constants: its commission, cost terms and kernel (`market_envs.fill`)


# --------------------------------------------------------------------- precompute


FEATURE_BLOCK_ELEMENTS = 1 << 15
"""About how many elements (bars x stocks) `normalized_feature_table` computes at a time: its
float64 temporaries of a block stay in the CPU's cache (a whole column of a year of minute bars
is tens of MB, read and written once per operation)."""


def feature_block_rows(num_tickers: int) -> int:
    """Bars per block of `normalized_feature_table`: a multiple of 64, so that every block but the
    last holds a multiple of 64 elements and each element meets the same (vectorised or scalar
    tail) code of every elementwise kernel as in one pass over the whole column: the same bits."""
    return max(64, FEATURE_BLOCK_ELEMENTS // max(num_tickers, 1) // 64 * 64)


def normalized_feature_table(
    data: MarketData, names: tuple[str, ...], clip: float, out: Tensor | None = None
) -> Tensor:
    """The observed features of every bar, normalised as the module docstring says.

    Returns float32 [T, N, len(names)] on the data's device: `out` when given (a
    float32 [T, N, len(names)] tensor or view, such as the env's observation table),
    else a new tensor. Each feature is computed in float64 and written into its
    column, a block of bars at a time (`feature_block_rows`), so the work space is a few
    float64 temporaries of one block, never a float64 copy of the whole table, and they stay
    in the CPU's cache (a tournament worker's first pod builds these tables: about 3x faster
    than whole columns on the training period of synthetic-edge-minute; the same values, bit
    for bit, tests/test_env_tables.py).
    """
    stats = (data.feature_mean, data.feature_std)
    if stats[0] is None or stats[1] is None:
        warnings.warn(
            f"panel {data.name!r} carries no training statistics: its features are normalised with "
            f"statistics fitted on the panel itself ({data.start} .. {data.end}); for a validation or "
            f"test period that looks ahead. Cut periods with MarketData.split / period, or load the data "
            f"set by recipe (market_envs.data.load attaches its training statistics).",
            UserWarning,
            stacklevel=3,
        )
        stats = data.fit_normalization()
    if out is None:
        out = torch.empty((data.num_bars, data.num_tickers, len(names)), dtype=torch.float32, device=data.device)
    mean, std = stats
    mean, std = mean.double(), std.double()
    indices = [data.feature_names.index(name) for name in names]
    rows = feature_block_rows(data.num_tickers)
    before = data.lookback_bars(1, ("close",))[:, :, 0]  # the bar before the first, when the panel knows it
    for lo in range(0, data.num_bars, rows):  # a loop over blocks of bars, once, at construction
        hi = min(data.num_bars, lo + rows)
        close = data.close[max(lo - 1, 0) : hi].double()  # from the bar before the block's first
        prev_close = close[: hi - lo] if lo else torch.cat([before.double() if len(before) else close[:1], close[:-1]])
        for k, (name, index) in enumerate(zip(names, indices)):  # the few feature names
            x = data.features[lo:hi, :, index].double()
            if name in PRICE_LIKE_FEATURES:
                column = 100.0 * torch.log(x.clamp_min(1e-12) / prev_close)
            elif name == "volume":
                column = torch.log1p(x.clamp_min(0.0)) - torch.log1p(mean[index].clamp_min(0.0))
            else:
                column = (x - mean[index]) / std[index]
            del x
            out[lo:hi, :, k] = torch.nan_to_num(column, nan=0.0, posinf=clip, neginf=-clip).clamp_(-clip, clip)
    return out


def return_tstat_table(close: Tensor, windows: tuple[int, ...], clip: float) -> Tensor:
    """The ``ret_tstat_{w}`` features of `EnvConfig.return_windows`: float32 [T, N, len(windows)].

    Row t, window w: `trailing_tstat` of the log close-to-close returns, bars
    t-w+1 .. t (0 for rows t < w and for windows without movement); clipped to
    [-clip, clip].
    """
    close = close.double()
    returns = torch.zeros_like(close)
    returns[1:] = torch.log(close[1:].clamp_min(1e-12) / close[:-1].clamp_min(1e-12))
    columns = [trailing_tstat(returns, w) for w in windows]  # the few windows, once, at construction
    table = torch.stack(columns, dim=-1) if columns else close.new_zeros((*close.shape, 0))
    return torch.nan_to_num(table, nan=0.0).clamp(-clip, clip).float()


def default_features(data: MarketData) -> tuple[str, ...]:
    """The panel features observed when ``EnvConfig.features`` is None: all of them but
    those the data cannot supply (`MarketData.unavailable_features`, close-only data)."""
    unavailable = set(data.unavailable_features)
    return tuple(name for name in data.feature_names if name not in unavailable)


def observed_feature_table(data: MarketData, config: EnvConfig, out: Tensor | None = None) -> Tensor:
    """Every feature the env observes per stock, in observation order: float32 [T, N, F].

    The panel features (`normalized_feature_table` of ``config.features``) followed by
    the ``ret_tstat_{w}`` features of ``config.return_windows``, written into `out`
    when given (float32 [T, N, F]; the env passes a view of its observation table).

    Trailing windows read the bars before the panel's first (`MarketData.lookback`: a period's
    or a fold's earlier bars), as the cost tables do: a period's row 0 equals the longer panel's
    row at the same bar (the previous close of the price-like features, and every window w the
    lookback covers); only bars the data has no past for (the very start of the data) see less.
    """
    names = config.features if config.features is not None else default_features(data)
    if out is None:
        width = len(names) + len(config.return_windows)
        out = torch.empty((data.num_bars, data.num_tickers, width), dtype=torch.float32, device=data.device)
    if names:
        normalized_feature_table(data, names, config.feature_clip, out=out[:, :, : len(names)])
    if config.return_windows:
        close, earlier = close_with_lookback(data, max(config.return_windows))
        out[:, :, len(names) :] = return_tstat_table(close, config.return_windows, config.feature_clip)[earlier:]
    return out


def close_with_lookback(data: MarketData, bars: int) -> tuple[Tensor, int]:
    """The closes [h + T, N] of `data` with the h <= `bars` bars of its lookback before them, and h
    (`MarketData.features_with_lookback`)."""
    close, earlier = data.features_with_lookback(bars, ("close",))
    return close[:, :, 0], earlier


def turbulence_table(data: MarketData, window: int) -> Tensor:
    """`turbulence_index` of `data`'s bars, float64 [T], its windows reading the bars before the
    first (`close_with_lookback`: window + 1 closes give the first bar a full window of returns)."""
    close, earlier = close_with_lookback(data, window + 1)
    return turbulence_index(close, window)[earlier:]


def turbulence_index(close: Tensor, window: int, chunk: int = 256) -> Tensor:
    """FinRL's turbulence index per bar, causal: float64 [T].

    For bar t: d_t = (r_t - mu)^T pinv(Sigma) (r_t - mu), with r the close-to-close
    returns and mu, Sigma their mean and covariance over bars t-window .. t-1. Bars
    with less history get 0. Computed in chunks over time (a loop over time only).
    """
    close = close.double()
    returns = torch.cat([torch.zeros_like(close[:1]), close[1:] / close[:-1] - 1.0], dim=0)
    num_bars = returns.shape[0]
    out = torch.zeros(num_bars, dtype=torch.float64, device=close.device)
    if num_bars <= window:
        return out
    history = returns.unfold(0, window, 1)  # [T - window + 1, N, window]; row k = bars k .. k+window-1
    for lo in range(window, num_bars, chunk):
        hi = min(num_bars, lo + chunk)
        past = history[lo - window : hi - window]  # bars t-window .. t-1 for t in [lo, hi)
        mu = past.mean(dim=-1)
        centred = past - mu.unsqueeze(-1)
        cov = centred @ centred.transpose(1, 2) / (window - 1)
        deviation = (returns[lo:hi] - mu).unsqueeze(-1)
        out[lo:hi] = (deviation.transpose(1, 2) @ torch.linalg.pinv(cov, hermitian=True) @ deviation).reshape(-1)
    return out


# --------------------------------------------------------------------- step kernel


def _aim_weights(actions: Tensor, rules: _Rules) -> Tensor:
    """Weights mode: the aim portfolio of the actions, [E, N] (`EnvConfig.weights_map`)."""
    if rules.short_selling:
        if rules.market_neutral:
            actions = actions - actions.mean(-1, keepdim=True)
        if rules.linear_weights:  # in place on the centred copy, never on the caller's actions
            actions = actions.mul_(rules.linear_weights) if rules.market_neutral else actions * rules.linear_weights
        gross = actions.abs().sum(-1, keepdim=True)
        if rules.max_leverage != 1.0:
            gross = gross / rules.max_leverage
        return actions / gross.clamp_min(1.0)
    weights = actions.clamp(0.0, 1.0)
    if rules.linear_weights:
        weights = weights * rules.linear_weights
    return weights / weights.sum(-1, keepdim=True).clamp_min(1.0)


def policy_rates(rate_actions: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """`EnvConfig.rate_action`: each stock's trade rate from its rate action (clipped to [-1, 1]),
    ``((1 + r) / 2)^2``: 0 at -1 (no trade), 1 at +1 (all the way), 0.25 at 0; a new tensor of
    `dtype` (default the actions'). ``(1 + r) / 2`` is computed as ``0.5 + 0.5 r`` (the same float:
    halving is exact) in the pass that converts to `dtype`, then squared in place: two passes."""
    dtype = dtype or rate_actions.dtype
    half = torch.full((1,) * max(rate_actions.dim(), 1), 0.5, dtype=dtype, device=rate_actions.device)
    return torch.add(half, rate_actions, alpha=0.5).square_()  # `half` a tensor: the sum takes its dtype


def rate_actions(rates: Tensor) -> Tensor:
    """The rate actions whose `policy_rates` are `rates` (in [0, 1]): ``2 sqrt(kappa) - 1``."""
    return rates.clamp(0.0, 1.0).sqrt().mul(2.0).sub(1.0)


def _read_actions(actions: Tensor, rules: _Rules, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """The actions as the orders read them, new tensors of `dtype`: the aims' (or the shares') block
    [E, N], clipped to [-1, 1] with NaN as 0 (`clean_actions`), and with `EnvConfig.rate_action`
    each stock's trade rate [E, N], `policy_rates` of the second block cleaned alike (a NaN rate
    action counts as 0: rate 0.25); None without it.

    Both blocks are cleaned together, in the actions' own dtype; then each is read into a new
    contiguous tensor: the aims by a copy, the rates by `policy_rates`' first pass. No
    view of a shared tensor is written to: under torch.compile such a write into half a tensor
    becomes a scatter, which inductor recomputed in every loop that read the other half.
    (Cleaning and converting both blocks at once, the aims a view, measured no faster on the
    quiet grid of 2026-11-27 and slower compiled with every cost term: benchmarks/RESULTS.md.)

    Eager on the CPU, float32 actions read into float64 (`market_envs.native_fill.reads_actions_natively`)
    are read by fill_costs.c instead, both blocks in one pass with the same bits
    (`market_envs.native_fill.read_actions_c`): torch's five eager ops had a fixed cost each, most of
    what the policy's rate added to the step at 1,024 sub-environments."""
    if reads_actions_natively(actions, dtype):  # eager on the CPU: one pass of fill_costs.c, the same bits
        return read_actions_c(actions, rules.rate_action)
    if not rules.rate_action:
        return clean_actions(actions, dtype), None
    aims, rates = clean_actions(actions, actions.dtype).chunk(2, dim=-1)  # the one cleaning rule, no conversion
    return aims.to(dtype, copy=True), policy_rates(rates, dtype)


class _Pace(NamedTuple):
    """How far a step moves the book toward its aim: per sub-environment, float64 [E, 1], or per
    stock [E, N] (a rate the policy chooses, `EnvConfig.rate_action`)."""

    rate: Tensor | None  # the trade rate (None: 1)
    band: Tensor | None  # the no-trade band, a weight (None: 0)


def _toward_aim(aim_value: Tensor, held_value: Tensor, value: Tensor, pace: _Pace, rules: _Rules) -> Tensor:
    """The value to trade per stock, [E, N] (+ buy, - sell): from the book `held_value` toward
    the aim `aim_value` ([E, N], at the fill price), through the no-trade band and at the trade
    rate (`EnvConfig.no_trade_band`, `trade_rate`); `value` [E, 1] is the portfolio's at the fill
    price, the band's unit."""
    gap = aim_value.sub_(held_value)  # in place: both are [E, N] tensors of this step (few passes, eager)
    if pace.band is not None:
        room = value.abs() * pace.band
        if rules.book_band:  # to the edge of the ball sum |aim - w| <= band
            distance = gap.abs().sum(-1, keepdim=True)
            gap = gap.mul_((1.0 - room / distance.clamp_min(1e-300)).clamp_min(0.0))
        else:  # each stock to the edge of its own band: the part of the gap beyond +-band
            gap = gap.sub_(torch.clamp(gap, -room, room))
    if pace.rate is not None:
        gap = gap.mul_(pace.rate)
    return gap


def _orders(
    actions: Tensor,
    holdings: Tensor,
    price: Tensor,
    cash: Tensor,
    rules: _Rules,
    pace: _Pace | None = None,
    rates: Tensor | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Requested sells and buys in shares (both >= 0) before cash limits and masks, for `actions`
    [E, N] and, with `rules.rate_action`, each stock's trade `rates` [E, N] (both as
    `_read_actions` gives them); `pace`: the trade rate and band (weights mode, when `rules` has
    either). The policy's rates apply after the band. `weights`: the aim of `actions`
    (`_aim_weights`) where the caller holds it already (read, not written to), else computed."""
    if rules.weights_mode:
        weights = _aim_weights(actions, rules) if weights is None else weights
        if rates is not None and pace is not None:  # the band first, then each stock's own rate
            pace = _Pace(rates, pace.band)
        if pace is None:  # today's rule: all the way to the aim (with the policy's rates: that share of it)
            value_at_fill = cash + (holdings * price).sum(-1)
            delta = weights * value_at_fill.unsqueeze(-1) / price - holdings
            if rates is not None:  # in place, and at rate 1 exactly today's orders
                delta = delta.mul_(rates)
        else:
            held = holdings * price
            value_at_fill = (cash + held.sum(-1)).unsqueeze(-1)
            delta = _toward_aim(weights * value_at_fill, held, value_at_fill, pace, rules).div_(price)
    else:
        delta = torch.trunc(actions * rules.max_shares)
    sells = (-delta).clamp_min(0.0)
    buys = delta.clamp_min(0.0)
    if not rules.short_selling:
        sells = torch.minimum(sells, holdings.clamp_min(0.0))
    elif not rules.weights_mode:
        sells = torch.minimum(sells, holdings + rules.max_shares).clamp_min(0.0)
    return sells, buys


def _mapping_rules(config: EnvConfig, num_stocks: int) -> dict[str, Any]:
    """The fields of `_Rules` that map actions to orders (`_orders`), from `config`."""
    linear = config.weights_map == "linear" and config.action_mode == "weights"
    return {
        "weights_mode": config.action_mode == "weights",
        "max_shares": float(config.max_shares),
        "short_selling": bool(config.short_selling),
        "market_neutral": bool(config.market_neutral),
        "max_leverage": float(config.max_leverage),
        "linear_weights": config.linear_scale * float(config.max_leverage) / num_stocks if linear else 0.0,
        "has_rate": config.trade_rate != 1.0,
        "has_band": config.no_trade_band != 0.0,
        "book_band": config.band_scope == "book",
        "rate_action": bool(config.rate_action),
    }


def _pace_of(config: EnvConfig, rules: _Rules, rows: int, device: torch.device) -> _Pace | None:
    """`config`'s trade rate and band for `rows` accounts, [rows, 1] each (None where off)."""
    if not (rules.has_rate or rules.has_band):
        return None

    def column(x: float) -> Tensor:
        return torch.full((rows, 1), x, dtype=torch.float64, device=device)

    return _Pace(
        column(config.trade_rate) if rules.has_rate else None, column(config.no_trade_band) if rules.has_band else None
    )


def clean_actions(actions: Tensor, dtype: torch.dtype) -> Tensor:
    """Actions clipped to [-1, 1], NaN as 0 (no order), a new tensor of `dtype`: checking them would
    cost a sync. Cleaned in the actions' own dtype, then converted (the same values: the clip's
    bounds and every float32 are exact in float64); three passes, two of them over float32.

    Compiled, NaN is found as ``a != a`` (then +-inf clipped to +-1 as nan_to_num's +-max are): the
    same values, but inductor vectorizes the comparison where it tests ``isnan`` one element at a
    time, and the compiled step cleans the actions again in every loop that reads them (the mean,
    the gross exposure, the orders: three or four times a step). Eager keeps nan_to_num's one pass
    (the comparison and the `where` would be two)."""
    if torch.compiler.is_compiling():
        return torch.where(actions != actions, 0.0, actions).clamp(-1.0, 1.0).to(dtype)
    return torch.nan_to_num(actions, nan=0.0).clamp_(-1.0, 1.0).to(dtype)


def _mapping_only(config: EnvConfig, num_stocks: int) -> _Rules:
    """`_Rules` holding only what maps actions to orders (the rest neutral)."""
    return _Rules(
        **_mapping_rules(config, num_stocks),
        reward_scale=1.0,
        initial_cash=float(config.initial_cash),
        account_low=0.0,
        account_high=1.0,
    )


def aim_weights(actions: Tensor, config: EnvConfig) -> Tensor:
    """Weights mode: the aim portfolio of `actions` [B, N] under `config`'s mapping (clipped,
    NaN as 0, market-neutral, linear or normalized, within the leverage), float64 [B, N]: the
    book the step moves toward at its trade rate and band. With `EnvConfig.rate_action` the
    actions are [B, 2N] and the aim is that of their first block."""
    if config.action_mode != "weights":
        raise ConfigError("aim_weights: the aim portfolio is a weights-mode idea (action_mode='weights')")
    rules = _mapping_only(config, actions.shape[-1] // config.actions_per_stock)
    return _aim_weights(_read_actions(actions, rules, torch.float64)[0], rules)


def aim_actions(aim: Tensor, config: EnvConfig) -> Tensor:
    """Actions whose aim portfolio (`aim_weights`) is `aim` [B, N], for a valid aim: one the
    mapping can give (within the leverage; long only without short selling; dollar-neutral
    when market-neutral), such as a weighted mean of other actions' aims. The mapping is
    ``aim = s x a`` below its gross limit (``s`` the linear scale, 1 when normalized), so the
    action is ``aim / s``, clipped to [-1, 1] (only rounding is clipped for a valid aim). With
    `EnvConfig.rate_action` these are the aims' block only: the caller appends the rates'."""
    rules = _mapping_only(config, aim.shape[-1])
    scale = rules.linear_weights or 1.0
    return (aim.to(torch.float64) / scale).clamp(-1.0, 1.0)


def target_holdings(actions: Tensor, holdings: Tensor, price: Tensor, cash: Tensor, config: EnvConfig) -> Tensor:
    """The shares each account asks to hold after a step of `actions`: the env's own mapping.

    `actions` [B, N] (clipped to [-1, 1], NaN as 0, as `StockTradingVecEnv.step` takes them),
    `holdings` [B, N] shares, `price` [N] or [B, N] the fill price (or the caller's estimate
    of it), `cash` [B], `config` the env rules (`EnvConfig`: action mode, weights map, trade
    rate, no-trade band, short selling, leverage). Returns float64 [B, N]: the holdings plus
    the orders of `_orders`, before the turbulence guard, the tradable mask (and the rule for
    a stock that left the index, `toward_zero`), the participation cap and the cash limit,
    which a step applies next. A live trader (`trader act`) turns a
    policy's actions into orders with it, by the rules the policy was trained under.
    """
    holdings = holdings.to(torch.float64)
    price = price.to(torch.float64).expand_as(holdings)
    rules = _mapping_only(config, holdings.shape[-1])
    if actions.shape[-1] != holdings.shape[-1] * config.actions_per_stock:
        raise UserError(
            f"target_holdings: {holdings.shape[-1]} stocks take {holdings.shape[-1] * config.actions_per_stock} "
            f"actions each under these rules, got {actions.shape[-1]}"
        )
    pace = _pace_of(config, rules, holdings.shape[0], holdings.device)
    actions, rates = _read_actions(actions, rules, torch.float64)
    sells, buys = _orders(actions, holdings, price, cash.to(torch.float64), rules, pace, rates)
    return holdings - sells + buys


def toward_zero(sells: Tensor, buys: Tensor, holdings: Tensor, where: Tensor) -> tuple[Tensor, Tensor]:
    """The orders `sells`, `buys` (shares, >= 0) from `holdings`, all [B, N], cut where `where`
    (bool, broadcast to [B, N]) so that a position may only shrink: a sale at most the long
    position, a purchase at most the short one; no purchase of a long or of a flat stock, no
    new or larger short, no turn through zero. The rule for a stock that has left the index
    (`MarketData.reducible`), in the env's fill (`tradable_orders`) and in the orders a live
    trader sends (`StockTradingVecEnv.requested_orders`)."""
    sells = torch.where(where, torch.minimum(sells, holdings.clamp_min(0.0)), sells)
    buys = torch.where(where, torch.minimum(buys, (-holdings).clamp_min(0.0)), buys)
    return sells, buys


def tradable_orders(
    sells: Tensor, buys: Tensor, holdings: Tensor, tradable: Tensor, reducible: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The part of the orders [B, N] that a fill at a bar with the masks `tradable` and `reducible`
    (rows of `MarketData.tradable` and `.reducible`; None: no such bar) lets through: all of it on
    a tradable bar, the part that shrinks the position on a reducible one (`toward_zero`), none
    elsewhere (a bar filled over a gap, a warm-up bar)."""
    zero = torch.zeros_like(sells)
    if reducible is None:
        return torch.where(tradable, sells, zero), torch.where(tradable, buys, zero)
    shrunk_sells, shrunk_buys = toward_zero(sells, buys, holdings, reducible)
    sells = torch.where(tradable, sells, torch.where(reducible, shrunk_sells, zero))
    buys = torch.where(tradable, buys, torch.where(reducible, shrunk_buys, zero))
    return sells, buys


def _step_orders(
    state: _State,
    actions: Tensor,
    price: Tensor,
    tradable: Tensor,
    guard: Tensor,
    rules: _Rules,
    pace: _Pace | None = None,
    reducible: Tensor | None = None,
    rates: Tensor | None = None,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The orders that reach the fill (sells and buys in shares, [E, N], as `fill_orders` takes
    them): the orders of the actions and rates (`_orders`, with the aim `weights` where the caller
    holds it), all sold where the turbulence `guard` is on, and what the fill bar's masks
    `tradable` and `reducible` let through (`tradable_orders`). A stock is sold or bought, never
    both."""
    holdings = state.holdings
    sells, buys = _orders(actions, holdings, price, state.cash, rules, pace, rates, weights)
    guard = guard.unsqueeze(-1)
    sells = torch.where(guard, holdings.clamp_min(0.0), sells)
    buys = torch.where(guard, torch.zeros_like(buys), buys)
    return tradable_orders(sells, buys, holdings, tradable, reducible)


def _account_columns(cash: Tensor, holdings: Tensor, value: Tensor, close: Tensor, rules: _Rules) -> Tensor:
    """Cash share and position shares of value, clipped to the space's bounds: float32 [E, 1 + N]."""
    denominator = torch.where(value.abs() > 1e-9, value, torch.ones_like(value)).unsqueeze(-1)
    shares = torch.cat([cash.unsqueeze(-1), holdings * close], dim=-1).div(denominator)
    return shares.clamp(rules.account_low, rules.account_high).float()


def step_kernel(state: _State, actions: Tensor, new_start: Tensor, new_end: Tensor, tables: _Tables, rules: _Rules):
    """The accounting of one step of every sub-environment; pure function of tensors.

    Returns the next state, reward, terminated, truncated, the info entries, and the
    account columns of the final and of the returned observations; the feature part
    of the observations is gathered afterwards (into recycled buffers).
    """
    t1 = state.t + 1
    price = tables.open.index_select(0, t1).double()
    tradable = tables.tradable.index_select(0, t1)
    reducible = tables.reducible.index_select(0, t1) if rules.leavers else None
    guard = tables.guard.index_select(0, state.t)
    actions, rates = _read_actions(actions, rules, price.dtype)
    pace = _Pace(tables.trade_rate, tables.band) if (rules.has_rate or rules.has_band) else None
    weights = _aim_weights(actions, rules) if rules.aim_reward else None  # the orders' and the reward's aim, once
    sells, buys = _step_orders(state, actions, price, tradable, guard, rules, pace, reducible, rates, weights)
    fill = fill_orders(state.cash, state.holdings, sells, buys, price, tables.open, tables.market, t1, rules.fill)
    holdings = fill.holdings

    close = tables.close.index_select(0, t1).double()
    if rules.borrow_per_bar > 0:  # the bar's borrow fee on the short notional at the close
        borrow = dot(holdings.clamp_max(0.0), close, rules.fill) * -rules.borrow_per_bar
        cash = fill.cash - borrow
    else:
        borrow = torch.zeros_like(fill.cash)
        cash = fill.cash
    value = cash + (holdings * close).sum(-1)
    if rules.aim_reward:  # the aim's return over the bar, at the value at the fill, less the step's costs
        value_at_fill = state.cash + (state.holdings * price).sum(-1)
        earned = value_at_fill * (weights * (close / price - 1.0)).sum(-1)
        paid = fill.commission + fill.spread + fill.impact + borrow
        reward = ((earned - paid) * rules.reward_scale).float()
    else:
        reward = ((value - state.value) * rules.reward_scale).float()
    terminated = value <= 0.0
    truncated = (t1 >= state.end) & ~terminated
    done = terminated | truncated
    info = {
        "t": t1,
        "value": value,
        "cash": cash,
        "holdings": holdings,
        "turnover": fill.traded / state.value.abs().clamp_min(1e-9),
        "costs": fill.commission + fill.spread + fill.impact + borrow,
        "cost_commission": fill.commission,
        "cost_spread": fill.spread,
        "cost_impact": fill.impact,
        "cost_borrow": borrow,
        "ordered_value": fill.ordered,
        "unfilled_value": fill.unfilled_value,
        "unfilled_shares": fill.unfilled_shares,
    }

    fresh_cash = torch.full_like(cash, rules.initial_cash)
    next_state = _State(
        t=torch.where(done, new_start, t1),
        end=torch.where(done, new_end, state.end),
        cash=torch.where(done, fresh_cash, cash),
        holdings=torch.where(done.unsqueeze(-1), torch.zeros_like(holdings), holdings),
        value=torch.where(done, fresh_cash, value),
    )
    final_account = _account_columns(cash, holdings, value, close, rules)
    account = torch.where(done.unsqueeze(-1), _fresh_account(final_account), final_account)
    return next_state, reward, terminated, truncated, info, final_account, account


def _fresh_account(like: Tensor) -> Tensor:
    """The account columns of a fresh episode: all cash, no positions. [1, 1 + N]."""
    fresh = torch.zeros((1, like.shape[-1]), dtype=like.dtype, device=like.device)
    fresh[:, 0] = 1.0
    return fresh


class _RecyclingBuffers:
    """Output tensors of one shape, reused once nobody but this pool holds them.

    On the CPU every fresh [E, obs_dim] output of tens of MB is a new mapping of
    memory whose pages fault in on first write; that cost more than the step itself
    (over half of a step's time at E=4096, N=30). So the env writes observations into
    buffers it recycles, but only a buffer that no tensor, view or numpy array outside
    this pool still references: what a caller keeps is never overwritten. On CUDA the
    caching allocator already recycles memory and a fresh tensor is returned.
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, size: int = 4) -> None:
        self.shape, self.dtype, self.device, self.size = shape, dtype, device, size
        self.buffers: list[Tensor] = []
        self.enabled = device.type == "cpu" and hasattr(torch._C, "_storage_Use_Count")
        if self.enabled:  # references to a buffer that only this pool holds, counted the same way
            probe = [torch.empty(1)]
            self.baseline = self._references(probe, 0)

    @staticmethod
    def _references(buffers: list[Tensor], index: int) -> tuple[int, int]:
        """(Python references, storage users) of ``buffers[index]``, pool's own included."""
        buffer = buffers[index]
        return sys.getrefcount(buffer), torch._C._storage_Use_Count(buffer.untyped_storage()._cdata)

    def take(self) -> Tensor:
        if self.enabled:
            for index in range(len(self.buffers)):
                if self._references(self.buffers, index) == self.baseline:
                    return self.buffers[index]
        fresh = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        if self.enabled and len(self.buffers) < self.size:
            self.buffers.append(fresh)
        return fresh


def _observe(tables: _Tables, t: Tensor, account: Tensor, out: Tensor) -> Tensor:
    """Observation rows for bars `t` with the given account columns, written into `out`."""
    torch.index_select(tables.obs, 0, t, out=out)
    out[:, : account.shape[1]] = account
    return out


def compile_options(device: torch.device) -> dict[str, Any] | None:
    """Inductor's options for the step kernel: on a CPU with AVX-512, 256-bit vectors (AVX2).

    With AVX-512 inductor vectorises float64 in pairs of 512-bit registers, 16 lanes, and the
    step's rows of N stocks (N = 30: one full vector and a masked tail of 14) with their many
    row sums ran markedly slower that way than with AVX2's 8 lanes, flat rate and costs alike
    (benchmarks/RESULTS.md, "Costs in the env step", third pass). Other CPUs keep inductor's
    own choice, and CUDA is untouched.
    """
    if device.type == "cpu" and torch.backends.cpu.get_cpu_capability() == "AVX512":
        return {"cpp.simdlen": 256}
    return None


def own_code(function: Callable) -> Callable:
    """A copy of `function` (a closure) with a code object of its own.

    torch.compile keeps the graphs it compiled per code object, at most
    ``torch._dynamo.config.recompile_limit`` (8) of them, and runs the function eagerly past
    that, silently. A closure made by one ``def`` (or a ``functools.partial`` of one function)
    shares its code object with every other closure made there: so each compiled kernel gets a
    copy of its own."""
    return types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )


_KERNELS: dict[tuple, Callable] = {}
"""The compiled step kernels built so far, by (rules, device, sub-environments, table shapes): an env
with the same rules and sizes (a tournament worker's next pod, a backtest's next group) reuses one,
and each holds a single graph (`own_code`)."""


def _shapes(tables: tuple) -> tuple:
    """The shapes of `tables` (a NamedTuple of tensors, None and NamedTuples of the same), nested
    as they are: a key that tells apart tables a compiled kernel cannot share."""
    return tuple(
        _shapes(table) if isinstance(table, tuple) else None if table is None else tuple(table.shape)
        for table in tables
    )


def compiled_step_kernel(rules: _Rules, device: torch.device, key: tuple = ()) -> Callable:
    """`step_kernel` with `rules` bound, through torch.compile, shared by equal (`rules`, `device`,
    `key`): ``key`` names the shapes of the inputs (see `_KERNELS`)."""
    full_key = (rules, device, *key)
    if full_key not in _KERNELS:

        def kernel(state, actions, new_start, new_end, tables):
            return step_kernel(state, actions, new_start, new_end, tables, rules)

        _KERNELS[full_key] = torch.compile(own_code(kernel), dynamic=False, options=compile_options(device))
    return _KERNELS[full_key]


_TABLES: weakref.WeakKeyDictionary[MarketData, dict[tuple, _Tables]] = weakref.WeakKeyDictionary()
"""The tables built so far, per panel (held weakly: they go with it) and (device, `EnvConfig`)."""

TABLES_PER_PANEL = 4
"""Tables kept per panel (the oldest goes first): a training and a validation env's, and more."""


def _shared_tables(data: MarketData, key: tuple, build: Callable[[], _Tables]) -> _Tables:
    """The env tables of `data` under `key`, built once per process while `data` lives.

    Building them (the normalised features and return statistics of every bar, the cost terms) is
    seconds for a year of minute bars; a tournament worker's pods and a backtest's groups build the
    same ones again and again (benchmarks/RESULTS.md, "Tournament scaling"). Nothing writes into a
    table after it is built, so envs share them."""
    built = _TABLES.setdefault(data, {})
    if key not in built:
        while len(built) >= TABLES_PER_PANEL:
            built.pop(next(iter(built)))
        built[key] = build()
    return built[key]


def tables_held(data: MarketData) -> int:
    """How many envs' tables are held for panel `data` (at most `TABLES_PER_PANEL`)."""
    return len(_TABLES.get(data, {}))


# --------------------------------------------------------------------- the env


class StockTradingVecEnv:
    """E independent trading sub-environments over the N stocks of `data`, on `device`.

    See the module docstring for timing, accounting, autoreset and the observation.

    :param data: the market panel; it is moved to `device`. Needs at least 2 bars.
    :param num_envs: number of sub-environments E.
    :param device: where all state lives ("cpu", "cuda", "cuda:1", a torch.device).
    :param config: trading rules (`EnvConfig`).
    :param compile: run the step kernel through ``torch.compile`` (faster after a
        one-off compilation; the results equal the eager kernel's within float
        tolerance).
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        data: MarketData,
        num_envs: int,
        device: torch.device | str = "cpu",
        config: EnvConfig | None = None,
        compile: bool = False,
    ) -> None:
        config = EnvConfig() if config is None else config
        if not isinstance(config, EnvConfig):
            raise ConfigError(f"StockTradingVecEnv: config must be an EnvConfig, got {type(config).__name__}")
        if int(num_envs) != num_envs or num_envs < 1:
            raise ConfigError(f"StockTradingVecEnv: num_envs must be a positive integer, got {num_envs}")
        if data.num_bars < 2:
            raise UserError(f"StockTradingVecEnv: data {data.name!r} has {data.num_bars} bar(s); at least 2 are needed")
        names = config.features if config.features is not None else default_features(data)
        unknown = [name for name in names if name not in data.feature_names]
        if unknown:
            raise ConfigError(
                f"EnvConfig.features: unknown feature(s) {unknown}; the panel has {list(data.feature_names)}"
            )
        unavailable = set(data.unavailable_features)
        lacking = [name for name in names if name in unavailable]
        if lacking:
            raise ConfigError(
                f"EnvConfig.features: {lacking} need columns that data set {data.name!r} lacks "
                f"({', '.join(data.meta['missing_columns'])})"
            )
        check_costs_for_data(config.costs, data)

        self.config = config
        self.num_envs = int(num_envs)
        self.device = resolve_device(device)
        self.data = data.to(self.device)
        self.tickers = self.data.tickers
        self.feature_names = names + tuple(f"ret_tstat_{w}" for w in config.return_windows)
        """Names of the F observed features per stock, in observation order."""
        self.num_stocks = self.data.num_tickers
        self.num_bars = self.data.num_bars
        self.actions_per_stock = config.actions_per_stock
        """1, or 2 with `EnvConfig.rate_action`: the action is [aims | rates], N entries each."""
        self.act_dim = self.num_stocks * self.actions_per_stock
        self.obs_dim = 1 + self.num_stocks * (1 + len(self.feature_names))

        self.bars_per_day = bars_per_day(self.data.timestamps)
        """Bars in a typical session of the data (1 for daily bars): a bar is 1 / (252 x this) of a year."""
        self.tables = _shared_tables(data, (self.device, config), self._build_tables)
        """The per-bar tables the step reads (observations, prices, masks, cost terms), shared by
        envs of the same data, device and rules; `market_envs.rollout` steps them too."""
        leavers = self.tables.reducible is not None
        costs = config.costs
        terms = costs.terms()
        self.rules = _Rules(
            **_mapping_rules(config, self.num_stocks),
            reward_scale=float(config.reward_scale),
            initial_cash=float(config.initial_cash),
            aim_reward=config.reward == "aim",
            account_low=-float(config.feature_clip) if config.short_selling else 0.0,
            account_high=float(config.feature_clip) if config.short_selling else 1.0,
            borrow_per_bar=float(costs.borrow_rate) / (TRADING_DAYS * self.bars_per_day) if terms.borrow else 0.0,
            leavers=leavers,
            fill=fill_rules(
                costs,
                config.buy_cost,
                config.sell_cost,
                weights_mode=config.action_mode == "weights",
                device=self.device,
                fused=compile,
                prices=self.tables.open.dtype,
            ),
        )
        """The step's constants (mapping, costs, fill rules, rewards): static under torch.compile."""
        pace = _pace_of(config, self.rules, self.num_envs, self.device)
        if pace is not None:
            self.tables = self.tables._replace(trade_rate=pace.rate, band=pace.band)
        self.compiled = bool(compile)
        shapes = (self.num_envs, *_shapes(self.tables))
        self._kernel = (
            compiled_step_kernel(self.rules, self.device, shapes)
            if compile
            else functools.partial(step_kernel, rules=self.rules)
        )

        last_bar = self.num_bars - 1
        if config.episode_length is None:  # run to the end of the data from any start
            self._episode_steps = last_bar
            self._last_start = last_bar - 1 if config.random_start else 0
        else:
            self._episode_steps = min(int(config.episode_length), last_bar)
            self._last_start = last_bar - self._episode_steps if config.random_start else 0

        low = np.full(self.obs_dim, -config.feature_clip, dtype=np.float32)
        high = -low
        low[: 1 + self.num_stocks] = self.rules.account_low
        high[: 1 + self.num_stocks] = self.rules.account_high
        self.single_observation_space = spaces.Box(low, high, dtype=np.float32)
        self.single_action_space = spaces.Box(-1.0, 1.0, shape=(self.act_dim,), dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(int(torch.randint(0, 2**62, (1,)).item()))  # from the global RNG, once
        self._state: _State | None = None
        shape = (self.num_envs, self.obs_dim)
        self._obs_buffers = _RecyclingBuffers(shape, torch.float32, self.device)
        self._final_obs_buffers = _RecyclingBuffers(shape, torch.float32, self.device)

    # ------------------------------------------------------------------ set-up
    def _build_tables(self) -> _Tables:
        data, n = self.data, self.num_stocks
        obs = torch.zeros((self.num_bars, self.obs_dim), dtype=torch.float32, device=self.device)
        # the features are written straight into the table: no second [T, N, F] copy at construction
        observed_feature_table(data, self.config, out=obs[:, 1 + n :].view(self.num_bars, n, -1))
        if self.config.turbulence_threshold is None:
            guard = torch.zeros(self.num_bars, dtype=torch.bool, device=self.device)
        else:
            guard = turbulence_table(data, self.config.turbulence_window) > self.config.turbulence_threshold
        return _Tables(
            open=data.open.contiguous(),
            close=data.close.contiguous(),
            tradable=data.tradable.to(torch.bool).contiguous(),
            obs=obs,
            guard=guard,
            market=market_tables(
                data, self.config.costs, self.config.action_mode == "weights", self.bars_per_day, self.device
            ),
            # a panel whose stocks never leave the index (or without membership) keeps the step as it was
            reducible=data.reducible.contiguous()
            if data.reducible is not None and bool(data.reducible.any())
            else None,
        )

    # ------------------------------------------------------------------ state views
    def require_reset(self) -> _State:
        """The state after `reset`; a clear error before it (every reader of the state calls this)."""
        if self._state is None:
            raise UserError("StockTradingVecEnv: call reset() before step() or reading the state")
        return self._state

    @property
    def t(self) -> Tensor:
        """Bar index of each sub-environment's current observation, int64 [E]."""
        return self.require_reset().t

    @property
    def cash(self) -> Tensor:
        """Cash of each sub-environment, float64 [E]."""
        return self.require_reset().cash

    @property
    def holdings(self) -> Tensor:
        """Shares held, float64 [E, N] (whole shares in shares mode)."""
        return self.require_reset().holdings

    @property
    def value(self) -> Tensor:
        """Portfolio value at the close of bar `t`, float64 [E]."""
        return self.require_reset().value

    @property
    def episode_end(self) -> Tensor:
        """Bar at which each sub-environment's episode is truncated, int64 [E]."""
        return self.require_reset().end

    @property
    def turbulence_guard(self) -> Tensor:
        """Bool [T]: bars whose orders the turbulence guard replaces by a sell-off."""
        return self.tables.guard

    # ------------------------------------------------------------------ API
    def _draw_starts(self) -> tuple[Tensor, Tensor]:
        if self.config.random_start and self._last_start > 0:
            start = torch.randint(
                0, self._last_start + 1, (self.num_envs,), generator=self._generator, device=self.device
            )
        else:
            start = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        return start, (start + self._episode_steps).clamp_max(self.num_bars - 1)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """Start a new episode in every sub-environment.

        :param seed: reseeds the env's own ``torch.Generator`` (random starts); the
            same seed gives the same starts and, with the same actions, the same run.
        :param options: None, or a starting book instead of all cash: ``{"cash": [E],
            "holdings": [E, N]}`` (float tensors; shares per stock), marked at each start
            bar's close. A walk-forward fold's policy takes over the previous fold's book
            this way. Episodes that end later restart from ``initial_cash`` as usual.
            ``"start": t`` (an int) starts every sub-environment at bar t instead
            (`trader act` decides at a chosen bar this way).
        :returns: obs float32 [E, obs_dim] and info with ``t`` [E] (the start bars).
        """
        if seed is not None:
            self._generator.manual_seed(int(seed))
        options = dict(options or {})
        start, end = self._draw_starts()
        if "start" in options:
            start, end = self._fixed_start(options.pop("start"))
        if options and ("cash" in options or "holdings" in options):
            return self._reset_from_book(start, end, options)
        cash = torch.full((self.num_envs,), float(self.config.initial_cash), dtype=torch.float64, device=self.device)
        holdings = torch.zeros((self.num_envs, self.num_stocks), dtype=torch.float64, device=self.device)
        self._state = _State(t=start, end=end, cash=cash, holdings=holdings, value=cash.clone())
        account = _fresh_account(self.tables.obs[:1, : 1 + self.num_stocks]).expand(self.num_envs, -1)
        return _observe(self.tables, start, account, self._obs_buffers.take()), {"t": start}

    def _fixed_start(self, bar: Any) -> tuple[Tensor, Tensor]:
        """Start and end bars [E] of episodes that all start at ``bar`` (`reset`'s ``"start"``)."""
        if isinstance(bar, bool) or int(bar) != bar or not 0 <= int(bar) < self.num_bars:
            raise UserError(
                f"StockTradingVecEnv.reset: options['start'] must be a bar in 0..{self.num_bars - 1}, got {bar!r}"
            )
        start = torch.full((self.num_envs,), int(bar), dtype=torch.int64, device=self.device)
        return start, (start + self._episode_steps).clamp_max(self.num_bars - 1)

    def _reset_from_book(self, start: Tensor, end: Tensor, book: dict[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        """`reset` with a starting book (cash [E], holdings [E, N]); see `reset`."""
        shapes = {"cash": (self.num_envs,), "holdings": (self.num_envs, self.num_stocks)}
        if set(book) - set(shapes) or len(book) != 2:
            raise UserError(
                f"StockTradingVecEnv.reset: options must hold exactly 'cash' and 'holdings', got {sorted(book)}"
            )
        values = {}
        for key, shape in shapes.items():
            value = torch.as_tensor(book[key], dtype=torch.float64, device=self.device)
            if tuple(value.shape) != shape:
                raise UserError(
                    f"StockTradingVecEnv.reset: options[{key!r}] must have shape {shape}, got {tuple(value.shape)}"
                )
            values[key] = value.clone()
        cash, holdings = values["cash"], values["holdings"]
        if not self.config.short_selling and bool((holdings < 0).any()):
            raise UserError("StockTradingVecEnv.reset: a starting book holds negative shares but short selling is off")
        close = self.tables.close.index_select(0, start).double()
        value = cash + (holdings * close).sum(dim=-1)
        self._state = _State(t=start, end=end, cash=cash, holdings=holdings, value=value)
        account = _account_columns(cash, holdings, value, close, self.rules)
        return _observe(self.tables, start, account, self._obs_buffers.take()), {"t": start}

    def buys_within_cash(self, buys: Tensor, cash: Tensor, price: Tensor, t: int) -> Tensor:
        """The part of the purchases `buys` that a step at bar `t` would fill within the cash.

        `buys` are orders in shares, [B, N] (>= 0), for any B accounts holding `cash`
        [B], priced at `price` [N] or [B, N] (the fill's open is not known at bar t: the
        caller's estimate, such as bar t's close). As the step cuts purchases
        (`market_envs.fill._buys_within_cash`), every order is cut by one common factor so that its whole
        bill (the commission with its minimum and fee per share, half-spread and impact,
        from bar t+1's rows of the cost tables, which read bars <= t only) fits the cash,
        and whole shares in shares mode are rounded down. The participation cap and the
        tradable mask, which cut orders but charge nothing, are left out. Returns
        float64 [B, N].

        A strategy that sizes its purchases with it sends none that the cash cannot pay
        at its estimated price (`trader.backtesting.strategies.BuyAndHold`).
        """
        return within_cash(buys, cash, price, t + 1, self.tables.market, self.rules.fill)

    def set_pace(self, trade_rate: Tensor | None = None, no_trade_band: Tensor | None = None) -> None:
        """Give each sub-environment its own trade rate and/or no-trade band (float [E] each),
        instead of the config's one for all: several candidates of a grid step as one batch.

        Only what the config already turns on can vary (a rate below 1, a band above 0: the
        kernel is built without the others); values are checked as `EnvConfig` checks its own.
        """
        for name, given, field, on in (
            ("trade_rate", trade_rate, "trade_rate", self.rules.has_rate),
            ("no_trade_band", no_trade_band, "band", self.rules.has_band),
        ):
            if given is None:
                continue
            if not on:
                raise UserError(
                    f"StockTradingVecEnv.set_pace: {name} varies only when the config sets one "
                    f"(EnvConfig.{name} {'below 1' if name == 'trade_rate' else 'above 0'})"
                )
            values = torch.as_tensor(given, dtype=torch.float64, device=self.device).reshape(-1, 1)
            if values.shape[0] != self.num_envs:
                raise UserError(
                    f"StockTradingVecEnv.set_pace: {name} needs {self.num_envs} values, got {values.shape[0]}"
                )
            high = 1.0 if name == "trade_rate" else math.inf
            if not bool(((values >= 0) & (values <= high)).all()):
                raise UserError(f"StockTradingVecEnv.set_pace: {name} must lie in [0, {high:g}]")
            self.tables = self.tables._replace(**{field: values.contiguous()})

    def requested_orders(self, actions: Tensor, price: Tensor) -> tuple[Tensor, Tensor]:
        """The orders a step would send for `actions` from the current book, priced at `price`.

        The action mapping of the step (``action_mode``, short selling, leverage, ...), on
        the current cash and holdings, with `price` [N] or [E, N] standing in for the fill's
        open (the caller's estimate where that open is not known yet, such as the last
        close). Returns (sells, buys) in shares, float64 [E, N], both >= 0, before what the
        fill does next: the tradable mask, the turbulence guard, the participation cap and
        the cash limit with its costs. A stock that is out of the index at the current bar
        (`MarketData.reducible`; the fill's bar may not be known yet) is only ordered toward
        zero (`toward_zero`), as the fill would: a live trader never buys a leaver.
        """
        state = self.require_reset()
        actions, rates = _read_actions(actions.to(self.device), self.rules, torch.float64)
        price = price.to(self.device, torch.float64).expand_as(state.holdings)
        pace = _Pace(self.tables.trade_rate, self.tables.band) if (self.rules.has_rate or self.rules.has_band) else None
        sells, buys = _orders(actions, state.holdings, price, state.cash, self.rules, pace, rates)
        if self.rules.leavers:
            sells, buys = toward_zero(sells, buys, state.holdings, self.tables.reducible.index_select(0, state.t))
        return sells, buys

    def fill_costs(self, before: Tensor, after: Tensor, bars: Tensor) -> dict[str, Tensor]:
        """Each stock's value traded and costs by term of the fills that took holdings from
        `before` to `after` at the open of `bars` (`fill_costs`; a trade list's rows)."""
        tables, rules = self.tables, self.rules
        before, after, bars = before.to(self.device), after.to(self.device), bars.to(self.device)
        return fill_costs(before, after, bars, tables.open, tables.market, rules.fill)

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """Advance every sub-environment by one bar.

        :param actions: float [E, N] in [-1, 1] on the env's device; values outside
            are clipped and NaN counts as 0 (no order), as checking would cost a sync.
        :returns: ``(obs, reward, terminated, truncated, info)``: obs float32
            [E, obs_dim], reward float32 [E], terminated/truncated bool [E]; info holds
            ``t`` (bar of the new observation, before reset), ``value``, ``cash``
            (float64 [E], after the fill, marked at that bar's close), ``holdings``
            [E, N], ``turnover`` (traded value / value at the previous close),
            ``costs`` (cash paid in costs) with its parts ``cost_commission``,
            ``cost_spread``, ``cost_impact``, ``cost_borrow``, ``ordered_value``,
            ``unfilled_value``, ``unfilled_shares`` (the module docstring defines
            them) and ``final_obs`` [E, obs_dim].
        """
        state = self.require_reset()
        if actions.shape != (self.num_envs, self.act_dim):
            raise UserError(
                f"StockTradingVecEnv.step: actions must have shape ({self.num_envs}, {self.act_dim}), "
                f"got {tuple(actions.shape)}"
            )
        if actions.device != self.device:
            raise UserError(f"StockTradingVecEnv.step: actions are on {actions.device}, the env on {self.device}")
        new_start, new_end = self._draw_starts()
        self._state, reward, terminated, truncated, info, final_account, account = self._kernel(
            state, actions, new_start, new_end, self.tables
        )
        info["final_obs"] = _observe(self.tables, info["t"], final_account, self._final_obs_buffers.take())
        obs = _observe(self.tables, self._state.t, account, self._obs_buffers.take())
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Release the state (the env holds no other resource)."""
        self._state = None

    def __repr__(self) -> str:
        return (
            f"StockTradingVecEnv(num_envs={self.num_envs}, stocks={self.num_stocks}, bars={self.num_bars}, "
            f"obs_dim={self.obs_dim}, mode={self.config.action_mode!r}, device={self.device}, "
            f"compiled={self.compiled})"
        )
