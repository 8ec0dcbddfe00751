"""The market env's rules in words and their config, `EnvConfig` (no torch: a run's files are read
without it).

The env is `market_envs.env.StockTradingVecEnv`; the tables it precomputes are
`market_envs.tables`, the step kernel that applies these rules is `market_envs.kernel`.

Every piece of state is a tensor on the env's device (CPU or CUDA): the bar index
``t`` [E], the last bar of the episode ``end`` [E], ``cash`` [E], ``holdings`` [E, N]
and the portfolio value at the last close ``value`` [E]. A step is a fixed number of
tensor operations whatever E and N are: no Python loop over environments, stocks or
bars, no ``.item()`` and no host copy.

Timing, for one sub-environment at bar t (all prices from ``data``):

1. The agent sees the observation at bar t, built from data at bars <= t only. Its
   action becomes orders in shares (`orders`; `target_holdings` as a function): in
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

"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from market_envs.costs import CostModel
from market_envs.errors import ConfigError

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
