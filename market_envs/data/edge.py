"""A planted, known edge for the synthetic market, and the oracle that trades it.

The rule (all kinds share it)
-----------------------------
A subset of K tickers carries the edge. At every bar t each of them gets a
*source* statistic computed from closes up to t only: the t-statistic of the last
`horizon` log returns of its source ticker,

    z_j,t = sum(r_j over the last H bars) / sqrt(sum(r_j^2 over the last H bars)),

signed by its kind:
- ``momentum``: its own z (recent relative winners keep winning),
- ``mean_reversion``: minus its own z (recent relative winners give back),
- ``lead_lag``: its leader's z (a follower moves the way its leader moved); leaders
  are other tickers that carry no edge themselves, `followers_per_leader` each.

The K signed statistics are ranked across the edge tickers (ties broken by ticker
order) and mapped to evenly spaced scores s_i,t with sum 0 and sum of squares K.
The return of bar t+1 of ticker i then gets a drift

    mu_i,t+1 = a * sigma_i,t+1 * s_i,t,

where sigma_i,t+1 is the generator's volatility of that bar as known before it
opens and `a` the per-bar signal-to-noise ratio. The drift is planted in the
intrabar (open to close) return; the score depends on bars <= t only. Kinds can be
combined: the edge tickers are dealt to the kinds in turn and ranked together.

The oracle
----------
`oracle_weights` knows the rule (tickers, kinds, leaders, horizon) but never a
future price, nor the volatility: its target weight at bar t is s_i,t / K (held
over bar t+1), dollar-neutral, zero for the other tickers and for the first
`horizon` bars of any panel it is given (the statistic needs H returns).

Calibration (strength in Sharpe units)
--------------------------------------
With w_i = s_i / K, the oracle's P&L over bar t+1 is (1/K) sum_i s_i (mu_i + e_i).
Its mean is (a/K) sum_i s_i^2 sigma_i; its variance (1/K^2) s' (D R D) s, with D the
bar volatilities and R the correlation of the bar returns. The scores are a
demeaned, ranked version of the signed source statistics, so their second moment is
close to M = E[s s'] = K * S / tr(S), S = P C P, where C_ij = sign_i sign_j
corr(source_i, source_j) and P = I - 11'/K removes the cross-sectional mean (the
oracle is dollar-neutral, so the market factor cancels; sector co-movement of the
sources does not, and M accounts for it). Hence, per bar,

    SR_bar = a * c,   c = (sum_i S_ii sigma_i) * sqrt(K) / sqrt(tr S * tr(S D R D)).

With equal, uncorrelated tickers c = sqrt(K). Over a session, the drift accrues in
every bar while the variance also comes from the overnight gap and varies with the
intraday profile and volatility regimes; the generator folds these into a time
factor tau (see `market_envs.data.synthetic`), giving the daily Sharpe
SR_day = a * c * tau, and the annual figure SR = sqrt(252) * SR_day. The target
Sharpe fixes a = SR / (sqrt(252) * c * tau). This is the **frictionless** Sharpe of
the oracle, rebalancing every bar, daily returns compounded from bar returns and
annualised with 252 days; the tests check it empirically across seeds.

A shift of the rule
-------------------
An edge may change within the panel (`EdgeShift`, a recipe's ``[synthetic.edge.shift]``): from a
session date on, the same tickers follow a new horizon, a new strength, or the opposite kind
(mean reversion becomes momentum, or back). The drift of bar t+1 follows the rule in force at bar
t+1, so the oracle's weight at bar t (held over t+1) reads the new rule from the bar before the
shift on; each regime's strength is calibrated as above. Good hyperparameters then drift within
the training window, as population-based training assumes they may.

Costs
-----
The oracle rebalances every bar and its scores change by about sqrt(2/H) of their
size per bar, so its turnover is large: the stated Sharpe holds at zero cost only.
`oracle_weights(..., rebalance_every=n)` holds the weights for n bars (a cheaper,
weaker oracle). `python benchmarks/oracle_costs.py` prints the oracle's Sharpe at
several cost levels for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from market_envs.data.indicators import trailing_tstat
from market_envs.errors import ConfigError

KINDS = ("mean_reversion", "momentum", "lead_lag")
"""The kinds of planted edge."""

_SIGN = {"mean_reversion": -1.0, "momentum": 1.0, "lead_lag": 1.0}
_FLIPPABLE = ("mean_reversion", "momentum")
"""The kinds a shift may turn an edge into: each the other's sign, on the same tickers."""


@dataclass(frozen=True)
class EdgeShift:
    """A change of the planted rule from a session date on (the same tickers keep the edge).

    :param start: the first session date (ISO, exchange time) of the new rule.
    :param kind: the new kind: "mean_reversion" or "momentum", for an edge of one of those two
        kinds (the other one of the two); None keeps the kind.
    :param horizon: the new look-back in bars (>= 2); None keeps it.
    :param strength_sharpe: the new frictionless annual Sharpe ratio of the oracle (>= 0); None
        keeps it.
    """

    start: str
    kind: str | None = None
    horizon: int | None = None
    strength_sharpe: float | None = None

    def __post_init__(self) -> None:
        try:
            pd.Timestamp(self.start)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"edge shift start must be an ISO date, got {self.start!r}") from err
        if self.kind is not None and self.kind not in _FLIPPABLE:
            raise ConfigError(f"edge shift kind must be one of {list(_FLIPPABLE)}, got {self.kind!r}")
        if self.horizon is not None and (not isinstance(self.horizon, int) or self.horizon < 2):
            raise ConfigError(f"edge shift horizon must be an integer number of bars >= 2, got {self.horizon!r}")
        if self.strength_sharpe is not None and not (math.isfinite(self.strength_sharpe) and self.strength_sharpe >= 0):
            raise ConfigError(f"edge shift strength_sharpe must be a finite number >= 0, got {self.strength_sharpe}")
        if (self.kind, self.horizon, self.strength_sharpe) == (None, None, None):
            raise ConfigError("edge shift changes nothing: give kind, horizon or strength_sharpe")

    def first_bar(self, timestamps: pd.DatetimeIndex) -> int:
        """The index of the first bar of `timestamps` (exchange time) on or after `start`'s
        session (0 when every bar is; len(timestamps) when none is)."""
        days = timestamps.tz_localize(None) if timestamps.tz is not None else timestamps
        return int(np.searchsorted(days.normalize().asi8, pd.Timestamp(self.start).normalize().value, side="left"))


@dataclass(frozen=True)
class EdgeSpec:
    """A planted edge: which rule, on how many tickers, at what horizon and strength.

    :param kind: "mean_reversion", "momentum" or "lead_lag", or a tuple of them
        (the edge tickers are dealt to the kinds in turn and ranked together).
    :param strength_sharpe: the annualised Sharpe ratio that the oracle earns before
        costs (frictionless, rebalancing every bar); 0 plants nothing.
    :param fraction: fraction of the tickers that carry the edge (for lead_lag: the
        followers), used when `count` is None.
    :param count: number of tickers that carry the edge; overrides `fraction`.
    :param horizon: bars in the look-back window of the signal (the t-statistic of
        the last `horizon` returns). The default 30 matches the 30-bar indicators
        (rsi_30, cci_30, close_30_sma) an agent observes.
    :param followers_per_leader: lead_lag only: followers sharing one leader.
    :param seed: chooses which tickers carry the edge (and lead), independently of
        the market's own seed, so the oracle can rebuild the layout.
    :param shift: a change of the rule from a date on (`EdgeShift`); None: the rule holds
        throughout.
    """

    kind: str | tuple[str, ...] = "mean_reversion"
    strength_sharpe: float = 10.0
    fraction: float = 0.2
    count: int | None = None
    horizon: int = 30
    followers_per_leader: int = 4
    seed: int = 0
    shift: EdgeShift | None = None

    def __post_init__(self) -> None:
        kinds = (self.kind,) if isinstance(self.kind, str) else tuple(self.kind)
        unknown = [k for k in kinds if k not in KINDS]
        if not kinds or unknown:
            raise ConfigError(f"edge kind {self.kind!r}: each kind must be one of {list(KINDS)}")
        if len(set(kinds)) != len(kinds):
            raise ConfigError(f"edge kind {self.kind!r} lists a kind twice")
        object.__setattr__(self, "kind", kinds[0] if len(kinds) == 1 else kinds)
        if not (math.isfinite(self.strength_sharpe) and self.strength_sharpe >= 0):
            raise ConfigError(f"edge strength_sharpe must be a finite number >= 0, got {self.strength_sharpe}")
        if not 0.0 < self.fraction <= 1.0:
            raise ConfigError(f"edge fraction must be in (0, 1], got {self.fraction}")
        if self.count is not None and (not isinstance(self.count, int) or self.count < 2):
            raise ConfigError(f"edge count must be an integer >= 2 (ranks need two tickers), got {self.count!r}")
        if not isinstance(self.horizon, int) or self.horizon < 2:
            raise ConfigError(f"edge horizon must be an integer number of bars >= 2, got {self.horizon!r}")
        if not isinstance(self.followers_per_leader, int) or self.followers_per_leader < 1:
            raise ConfigError(f"edge followers_per_leader must be an integer >= 1, got {self.followers_per_leader!r}")
        if isinstance(self.shift, dict):
            object.__setattr__(self, "shift", shift_from_dict(self.shift))
        if self.shift is not None and not isinstance(self.shift, EdgeShift):
            raise ConfigError(f"edge shift must be a table of EdgeShift's fields, got {type(self.shift).__name__}")
        if self.shift is not None and self.shift.kind is not None and self.kinds not in ((k,) for k in _FLIPPABLE):
            raise ConfigError(f"edge shift kind: only an edge of one kind of {list(_FLIPPABLE)} can change kind")

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds as a tuple."""
        return (self.kind,) if isinstance(self.kind, str) else self.kind

    @classmethod
    def from_dict(cls, options: dict) -> EdgeSpec:
        """An `EdgeSpec` from a recipe's `[synthetic.edge]` table; unknown keys refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"edge: unknown key(s) {unknown}; expected some of {sorted(known)}")
        values = dict(options)
        if isinstance(values.get("kind"), list):
            values["kind"] = tuple(values["kind"])
        return cls(**values)

    def to_dict(self) -> dict:
        """Plain values (kind as a list when combined, the shift as a table or left out), for meta
        data and recipes."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if isinstance(out["kind"], tuple):
            out["kind"] = list(out["kind"])
        if self.shift is None:
            del out["shift"]
        else:
            out["shift"] = {
                f.name: getattr(self.shift, f.name)
                for f in fields(EdgeShift)
                if getattr(self.shift, f.name) is not None
            }
        return out

    def regime(self, shifted: bool) -> EdgeSpec:
        """The rule in force before the shift (`shifted` False: this spec without it) or after."""
        if not shifted or self.shift is None:
            return replace(self, shift=None)
        shift = self.shift
        return replace(
            self,
            shift=None,
            kind=shift.kind or self.kind,
            horizon=shift.horizon or self.horizon,
            strength_sharpe=self.strength_sharpe if shift.strength_sharpe is None else shift.strength_sharpe,
        )


def shift_from_dict(options: dict) -> EdgeShift:
    """An `EdgeShift` from a recipe's ``[synthetic.edge.shift]`` table; unknown keys refused."""
    known = {f.name for f in fields(EdgeShift)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"edge shift: unknown key(s) {unknown}; expected some of {sorted(known)}")
    if "start" not in options:
        raise ConfigError("edge shift needs a start date")
    values = dict(options)
    values["start"] = str(values["start"])  # a TOML date is a datetime.date
    return EdgeShift(**values)


def as_edge_spec(edge: EdgeSpec | dict | None) -> EdgeSpec | None:
    """Accept an `EdgeSpec`, a recipe table (dict) or None."""
    if edge is None or isinstance(edge, EdgeSpec):
        return edge
    if isinstance(edge, dict):
        return EdgeSpec.from_dict(edge)
    raise ConfigError(f"edge must be an EdgeSpec, a table of its fields or None, got {type(edge).__name__}")


@dataclass(frozen=True)
class EdgeLayout:
    """Where an edge sits in a panel of `n_tickers`: rebuilt from the spec alone.

    :param edge: column indices of the K tickers that carry the edge, in deal order.
    :param kinds: the kind of each edge ticker.
    :param source: column whose returns drive each edge ticker (itself, or its leader).
    :param sign: +1 (momentum, lead_lag) or -1 (mean_reversion) per edge ticker.
    :param leaders: columns of the lead_lag leaders (carry no edge themselves).
    """

    edge: np.ndarray
    kinds: tuple[str, ...]
    source: np.ndarray
    sign: np.ndarray
    leaders: np.ndarray

    @property
    def size(self) -> int:
        return len(self.edge)


def edge_layout(spec: EdgeSpec, n_tickers: int) -> EdgeLayout:
    """The tickers, kinds and leaders of `spec` in a panel of `n_tickers` columns."""
    count = spec.count if spec.count is not None else max(2, int(round(spec.fraction * n_tickers)))
    kinds = spec.kinds
    kind_of = [kinds[i % len(kinds)] for i in range(count)]
    followers = sum(k == "lead_lag" for k in kind_of)
    n_leaders = -(-followers // spec.followers_per_leader) if followers else 0
    if count + n_leaders > n_tickers:
        raise ConfigError(
            f"edge needs {count} edge tickers and {n_leaders} leaders, the market has {n_tickers} tickers"
        )
    order = np.random.default_rng(spec.seed).permutation(n_tickers)
    edge, leaders = order[:count], order[count : count + n_leaders]
    source = edge.copy()
    follower_number = 0
    for i, kind in enumerate(kind_of):  # loop over the K edge tickers, once, at build time
        if kind == "lead_lag":
            source[i] = leaders[follower_number // spec.followers_per_leader]
            follower_number += 1
    sign = np.array([_SIGN[k] for k in kind_of])
    return EdgeLayout(edge=edge, kinds=tuple(kind_of), source=source, sign=sign, leaders=leaders)


def score_grid(count: int) -> np.ndarray:
    """Evenly spaced rank scores for `count` tickers: sum 0, sum of squares `count`."""
    centred = np.arange(count, dtype=np.float64) - (count - 1) / 2.0
    return centred * math.sqrt(12.0 / (count * count - 1.0))


def cross_section_factor(layout: EdgeLayout, corr: np.ndarray, vols: np.ndarray) -> float:
    """c in SR_bar = a * c: the oracle's per-bar Sharpe per unit signal-to-noise.

    :param layout: the edge layout.
    :param corr: [N, N] correlation of bar returns of all tickers.
    :param vols: [N] relative volatilities of the tickers (any common scale).
    See the module docstring for the derivation.
    """
    k = layout.size
    source_corr = corr[np.ix_(layout.source, layout.source)]
    signed = source_corr * np.outer(layout.sign, layout.sign)
    demean = np.eye(k) - 1.0 / k
    s = demean @ signed @ demean
    d = vols[layout.edge]
    drd = corr[np.ix_(layout.edge, layout.edge)] * np.outer(d, d)
    return float(np.diag(s) @ d * math.sqrt(k) / math.sqrt(np.trace(s) * np.trace(s @ drd)))


class Regime(NamedTuple):
    """The rule of the edge from bar `first_bar` on: its horizon, the sign of each edge ticker's
    statistic (`EdgeLayout.sign` of the regime's kind) and its per-bar signal-to-noise ratio."""

    first_bar: int
    horizon: int
    sign: np.ndarray
    snr: float


class EdgePlanter:
    """Plants the edge bar by bar while the generator runs (a recursion over time).

    The score at bar t needs returns up to t, which include the drift planted at t,
    so this loops over bars; every step is a few numpy operations on K-vectors.
    With a second `Regime` (`after`), the drift of every bar from its ``first_bar`` on
    follows that regime's horizon, signs and strength.
    """

    def __init__(self, layout: EdgeLayout, horizon: int, snr: float, after: Regime | None = None) -> None:
        self.layout = layout
        self.regimes = [Regime(0, horizon, layout.sign, snr)] + ([after] if after is not None else [])
        self.grid = score_grid(layout.size)
        # columns whose returns are tracked: the edge tickers first, then the leaders
        self.columns = np.concatenate([layout.edge, layout.leaders])
        where = {int(c): j for j, c in enumerate(self.columns)}
        self.position = np.array([where[int(c)] for c in layout.source])
        self.own_only = bool(np.array_equal(self.position, np.arange(layout.size)))

    def plant(self, intra: np.ndarray, gap: np.ndarray, scale: np.ndarray) -> None:
        """Add the drift to `intra` in place.

        :param intra: [T, N] intrabar log returns (noise), modified in place.
        :param gap: [T, N] overnight log gaps (part of the bar return, no drift).
        :param scale: [T, K] each edge ticker's bar volatility as known before the bar.
        """
        k, grid = self.layout.size, self.grid
        before, after = self.regimes[0], self.regimes[-1]
        switch = after.first_bar if len(self.regimes) > 1 else len(intra)
        drift = before.snr * scale
        drift[switch:] = after.snr * scale[switch:]
        returns = intra[:, self.columns] + gap[:, self.columns]  # [T, S], the drift added below
        planted = np.zeros_like(scale)
        sums = {
            h: (np.zeros(len(self.columns)), np.zeros(len(self.columns))) for h in {r.horizon for r in self.regimes}
        }
        score = np.zeros(k)
        for t in range(len(returns)):  # a recursion: the score at t needs the drift at t
            r = returns[t]
            planted[t] = d = drift[t] * score
            r[:k] += d
            for h, (sum1, sum2) in sums.items():
                sum1 += r
                sum2 += r * r
                if t >= h:
                    old = returns[t - h]
                    sum1 -= old
                    sum2 -= old * old
            rule = after if t + 1 >= switch else before  # the rule of bar t+1, whose drift this score sets
            if t >= rule.horizon - 1:
                sum1, sum2 = sums[rule.horizon]
                stat = sum1 / np.sqrt(np.maximum(sum2, 1e-300))
                stat = rule.sign * (stat[:k] if self.own_only else stat[self.position])
                score = np.empty(k)
                score[stat.argsort(kind="stable")] = grid
            else:
                score = np.zeros(k)
        intra[:, self.layout.edge] += planted


def signal_scores(log_returns: torch.Tensor, layout: EdgeLayout, horizon: int) -> torch.Tensor:
    """The rank scores s_t [T, K] from log returns [T, N] (row t uses rows <= t).

    Rows before the first full window (t < horizon, counting the first row's return
    as unknown) are zero. Vectorised over time with cumulative sums.
    """
    columns = np.concatenate([layout.edge, layout.leaders])
    stat = trailing_tstat(log_returns[:, torch.as_tensor(columns, device=log_returns.device)], horizon)
    where = {int(c): j for j, c in enumerate(columns)}
    position = torch.as_tensor([where[int(c)] for c in layout.source], device=stat.device)
    sign = torch.as_tensor(layout.sign, dtype=stat.dtype, device=stat.device)
    stat = sign * stat[horizon:, position]
    order = torch.argsort(stat, dim=1, stable=True)
    grid = torch.as_tensor(score_grid(layout.size), dtype=stat.dtype, device=stat.device)
    ranked = torch.empty_like(stat).scatter_(1, order, grid.expand_as(stat).contiguous())
    scores = torch.zeros(log_returns.shape[0], layout.size, dtype=stat.dtype, device=stat.device)
    scores[horizon:] = ranked
    return scores


def oracle_weights(data, spec: EdgeSpec, rebalance_every: int = 1, long_only: bool = False) -> torch.Tensor:
    """The oracle's target weights [T, N] on `data.device`: row t uses closes <= t only.

    Row t is the portfolio to hold over bar t+1 (decided at bar t's close): s_i,t / K
    on the edge tickers, zero elsewhere; dollar-neutral; zero during the first
    `spec.horizon` bars of the panel and wherever a ticker is not tradable.

    :param data: a `MarketData` built by `synthetic(..., edge=spec)` (or a slice of it).
    :param spec: the planted edge (the oracle knows the rule, not the prices ahead).
    :param rebalance_every: hold the weights for this many bars (1: every bar, the
        calibrated frictionless oracle; larger: less turnover, less edge).
    :param long_only: for an env without short selling: hold only the edge tickers
        with a positive score, weights proportional to the score and summing to 1
        (fully invested, so it also carries the market's risk; its Sharpe is not the
        calibrated one, it is the long-only ceiling).
    """
    spec = as_edge_spec(spec)
    if spec is None:
        raise ConfigError("oracle_weights needs the EdgeSpec the data was built with")
    if not isinstance(rebalance_every, int) or rebalance_every < 1:
        raise ConfigError(f"rebalance_every must be an integer >= 1, got {rebalance_every!r}")
    layout = edge_layout(spec, data.num_tickers)
    planted = data.meta.get("edge_tickers")
    if planted is not None and list(planted) != [data.tickers[i] for i in layout.edge]:
        raise ConfigError(
            f"the edge of {data.name!r} sits on {list(planted)[:5]}..., the spec puts it on "
            f"{[data.tickers[i] for i in layout.edge][:5]}...: pass the spec the data was built with"
        )
    close = data.close.double()
    log_returns = torch.zeros_like(close)
    log_returns[1:] = torch.log(close[1:] / close[:-1])
    scores = signal_scores(log_returns, layout, spec.horizon)
    if spec.shift is not None:  # row t holds over bar t+1: the new rule from the bar before the shift on
        later = spec.regime(True)
        shifted = signal_scores(log_returns, edge_layout(later, data.num_tickers), later.horizon)
        rows = torch.arange(len(scores), device=scores.device) >= spec.shift.first_bar(data.timestamps) - 1
        scores = torch.where(rows[:, None], shifted, scores)
    scores = scores / layout.size
    if long_only:
        positive = scores.clamp_min(0.0)
        scores = positive / positive.sum(dim=1, keepdim=True).clamp_min(1e-12)
    if rebalance_every > 1:
        held = (torch.arange(len(scores), device=scores.device) // rebalance_every) * rebalance_every
        scores = scores[held]
    weights = torch.zeros(close.shape, dtype=torch.float32, device=close.device)
    weights[:, torch.as_tensor(layout.edge, device=close.device)] = scores.float()
    return weights * data.tradable.to(weights.dtype)


def portfolio_returns(weights: torch.Tensor, close: torch.Tensor, cost: float = 0.0) -> torch.Tensor:
    """Bar returns [T-1] of holding `weights[t]` over bar t+1, less `cost` x turnover.

    A simple frictionless book-keeping (weights reset each bar, no cash constraint),
    for checking the oracle; the backtest engine is the one for strategies.
    """
    bar = close[1:].double() / close[:-1].double() - 1.0
    gross = (weights[:-1].double() * bar).sum(dim=1)
    previous = torch.cat([torch.zeros_like(weights[:1]), weights[:-2]]).double()
    turnover = (weights[:-1].double() - previous).abs().sum(dim=1)
    return gross - cost * turnover
