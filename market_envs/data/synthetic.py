"""`synthetic`: a seeded, realistic market of N tickers, minute bars by default.

The model (log returns; every ticker i, bar t of session d):

    r_i,t = drift + sigma_i * sqrt(q_t) * v_i,t * x_i,t  (+ the overnight gap on a session's first bar)
    x_i,t = beta_i sqrt(h_d) f_t + gamma_i sqrt(g_s,d) e_s,t + delta_i sqrt(k_i,d) u_i,t

- factors: one market factor f, one factor e per sector s, idiosyncratic noise u
  (independent standard normals); loadings with beta^2 + gamma^2 + delta^2 = 1, so
  x has unit variance and tickers correlate through f and e;
- volatility clustering: h, g and k are GARCH(1,1) variance multipliers (mean 1)
  updated once a session from the previous session's standardised shocks, and v an
  intraday log-normal stochastic volatility (AR(1) in log, mean square 1);
- U-shaped intraday volatility: q_t, the share of the session's variance in bar t,
  follows a profile high at the open, low at midday, raised at the close;
- overnight gaps: a share `overnight_share` of the daily variance falls between
  sessions and moves the first open away from the previous close; within a session
  each bar opens at the previous close;
- OHLC: high and low extend beyond open and close by half-normal amounts scaled
  by the bar's volatility, so high >= max(open, close) and low <= min(open, close);
- fat tails (optional, `tail_df`): the idiosyncratic and sector shocks are Student-t
  with that many degrees of freedom, scaled to unit variance, instead of normal;
- bid-ask bounce (optional, `half_spread_bps`): the prices above are mid-quotes; the
  open and the close are then trades at the bid or the ask (each side with
  probability 1/2, independently), half a spread away from the mid, and high and low
  are the ask above the highest mid and the bid below the lowest, so the high-low
  estimators of the spread (Abdi and Ranaldo 2017, which `market_envs.costs` uses)
  read it;
- volume: a per-ticker daily level x a U-shaped profile x exp(kappa |x| + noise),
  so volume is higher at the open and close and when returns are large.

Timestamps come from `market_envs.data.calendar` (NYSE sessions, bars stamped at
their open). The benchmark "SYNTH-INDEX" is the cap-weighted index of the tickers
(fixed share counts, starting at 100), standing in for QQQ. The same arguments give
bit-identical data. An optional `EdgeSpec` plants a known edge (see
`market_envs.data.edge`). Everything but the edge recursion is vectorised over
tickers and bars; the GARCH update loops over sessions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from market_envs.data.calendar import bar_minutes, session_bars
from market_envs.data.edge import EdgePlanter, EdgeSpec, Regime, as_edge_spec, cross_section_factor, edge_layout
from market_envs.data.frame import from_frame
from market_envs.data.panel import MarketData
from market_envs.errors import ConfigError

BENCHMARK_NAME = "SYNTH-INDEX"
TRADING_DAYS = 252


@dataclass(frozen=True)
class MarketModel:
    """Parameters of the synthetic market (the defaults give a plausible US large-cap day).

    :param n_sectors: number of sector factors (tickers are dealt to sectors).
    :param annual_vol: (low, high) range of the tickers' annualised volatilities.
    :param market_share: mean share of a ticker's variance from the market factor.
    :param sector_share: mean share of its variance from its sector factor.
    :param annual_drift: annualised log drift of every ticker.
    :param overnight_share: share of the daily variance in the overnight gap.
    :param open_boost: extra intraday volatility at the open (x times midday, decaying).
    :param close_boost: extra intraday volatility into the close.
    :param garch_alpha: GARCH(1,1) reaction to the previous session's squared shock.
    :param garch_beta: GARCH(1,1) persistence; alpha + beta < 1.
    :param sv_halflife_minutes: half-life of the intraday stochastic volatility.
    :param sv_std: stationary standard deviation of the intraday log-volatility.
    :param daily_volume: median shares traded per ticker and session.
    :param volume_kappa: sensitivity of log volume to |standardised return|.
    :param volume_noise: standard deviation of log-volume noise.
    :param price_range: (low, high) range of the starting prices.
    :param tail_df: None (normal shocks) or the degrees of freedom (> 2) of Student-t
        idiosyncratic and sector shocks, scaled to unit variance: fat tails.
    :param half_spread_bps: half the quoted spread, in basis points of the mid: the bid-ask
        bounce of the open and close trades and the reach of high and low (0: none, every
        price a mid).
    """

    n_sectors: int = 10
    annual_vol: tuple[float, float] = (0.18, 0.45)
    market_share: float = 0.30
    sector_share: float = 0.15
    annual_drift: float = 0.05
    overnight_share: float = 0.2
    open_boost: float = 1.6
    close_boost: float = 0.8
    garch_alpha: float = 0.08
    garch_beta: float = 0.90
    sv_halflife_minutes: float = 30.0
    sv_std: float = 0.25
    daily_volume: float = 2.0e6
    volume_kappa: float = 0.4
    volume_noise: float = 0.3
    price_range: tuple[float, float] = (20.0, 400.0)
    tail_df: float | None = None
    half_spread_bps: float = 0.0

    def __post_init__(self) -> None:
        if self.tail_df is not None and not (math.isfinite(self.tail_df) and self.tail_df > 2):
            raise ConfigError(f"tail_df must be None or a number above 2 (finite variance), got {self.tail_df}")
        if not (math.isfinite(self.half_spread_bps) and 0 <= self.half_spread_bps < 1000):
            raise ConfigError(f"half_spread_bps must be in [0, 1000), got {self.half_spread_bps}")
        if self.garch_alpha < 0 or self.garch_beta < 0 or self.garch_alpha + self.garch_beta >= 1:
            raise ConfigError(
                f"GARCH needs alpha, beta >= 0 and alpha + beta < 1, got {self.garch_alpha}, {self.garch_beta}"
            )
        if not 0 <= self.overnight_share < 1:
            raise ConfigError(f"overnight_share must be in [0, 1), got {self.overnight_share}")
        if self.market_share < 0 or self.sector_share < 0 or self.market_share + self.sector_share >= 0.95:
            raise ConfigError("market_share + sector_share must be below 0.95 (idiosyncratic risk stays)")
        if self.n_sectors < 1:
            raise ConfigError(f"n_sectors must be >= 1, got {self.n_sectors}")


def as_market_model(model: MarketModel | dict | None) -> MarketModel:
    """Accept a `MarketModel`, a recipe's `[synthetic.model]` table (dict) or None."""
    if model is None:
        return MarketModel()
    if isinstance(model, MarketModel):
        return model
    if isinstance(model, dict):
        known = {f.name for f in fields(MarketModel)}
        unknown = sorted(set(model) - known)
        if unknown:
            raise ConfigError(f"synthetic model: unknown key(s) {unknown}; expected some of {sorted(known)}")
        return MarketModel(**{k: tuple(v) if isinstance(v, list) else v for k, v in model.items()})
    raise ConfigError(f"model must be a MarketModel, a table of its fields or None, got {type(model).__name__}")


def intraday_profile(time_of_day: np.ndarray, model: MarketModel) -> np.ndarray:
    """Relative intraday volatility at each fraction of the session (U-shaped).

    1 at midday, 1 + open_boost at the open decaying over the first ~4% of the
    session (about 15 minutes), 1 + close_boost at the close building over the last
    ~5% (about 20 minutes).
    """
    x = np.asarray(time_of_day, dtype=np.float64)
    return 1.0 + model.open_boost * np.exp(-x / 0.04) + model.close_boost * np.exp(-(1.0 - x) / 0.05)


def garch_variance(alpha: float, beta: float) -> float:
    """Var[h] of a GARCH(1,1) variance multiplier with E[h] = 1 and normal shocks.

    From the GARCH(1,1) kurtosis: E[h^2] = (1 - (a+b)^2) / (1 - (a+b)^2 - 2 a^2).
    """
    persistence = (alpha + beta) ** 2
    denominator = 1.0 - persistence - 2.0 * alpha * alpha
    if denominator <= 0:
        raise ConfigError(f"GARCH alpha {alpha}, beta {beta} has no finite fourth moment")
    return (1.0 - persistence) / denominator - 1.0


@dataclass(frozen=True)
class _Tickers:
    """Per-ticker constants drawn from the seed."""

    vol: np.ndarray  # annualised volatility [N]
    beta: np.ndarray
    gamma: np.ndarray
    delta: np.ndarray
    sector: np.ndarray  # sector index [N]
    price: np.ndarray  # starting price [N]
    shares: np.ndarray  # shares outstanding for the index [N]
    volume: np.ndarray  # daily volume level [N]

    def correlation(self) -> np.ndarray:
        """Unconditional correlation of the tickers' bar shocks [N, N]."""
        same = self.sector[:, None] == self.sector[None, :]
        corr = np.outer(self.beta, self.beta) + np.outer(self.gamma, self.gamma) * same
        np.fill_diagonal(corr, 1.0)
        return corr


def _draw_tickers(n: int, model: MarketModel, rng: np.random.Generator) -> _Tickers:
    vol = rng.uniform(*model.annual_vol, size=n)
    market = np.clip(model.market_share * rng.uniform(0.5, 1.5, size=n), 0.0, 0.6)
    sector = np.clip(model.sector_share * rng.uniform(0.5, 1.5, size=n), 0.0, 0.3)
    price = np.exp(rng.uniform(*np.log(model.price_range), size=n))
    cap = np.exp(rng.normal(np.log(5e10), 1.0, size=n))
    return _Tickers(
        vol=vol,
        beta=np.sqrt(market),
        gamma=np.sqrt(sector),
        delta=np.sqrt(1.0 - market - sector),
        sector=rng.permutation(np.arange(n) % model.n_sectors),
        price=price,
        shares=cap / price,
        volume=model.daily_volume * np.exp(rng.normal(0.0, 0.7, size=n)),
    )


def _garch(shocks: np.ndarray, model: MarketModel) -> np.ndarray:
    """Variance multipliers [D, M] from standardised session shocks [D, M] (loop over sessions)."""
    alpha, beta = model.garch_alpha, model.garch_beta
    omega = 1.0 - alpha - beta
    out = np.empty_like(shocks)
    h = np.ones(shocks.shape[1])
    for d in range(shocks.shape[0]):  # GARCH is a recursion over sessions
        out[d] = h
        h = omega + alpha * h * shocks[d] ** 2 + beta * h
    return out


def _session_shock(component: np.ndarray, session: np.ndarray, n_sessions: int) -> np.ndarray:
    """Standardised sum of unit shocks [T, M] per session -> [D, M] (sessions contiguous)."""
    starts = np.flatnonzero(np.r_[True, session[1:] != session[:-1]])
    total = np.zeros((n_sessions, component.shape[1]))
    total[session[starts]] = np.add.reduceat(component, starts, axis=0)
    count = np.bincount(session, minlength=n_sessions).astype(np.float64)
    return total / np.sqrt(np.maximum(count, 1.0))[:, None]


def _combine(tick: _Tickers, f, e, u, h, g, k) -> np.ndarray:
    """Unit-variance correlated shocks from factor draws and their variance multipliers."""
    return tick.beta * np.sqrt(h) * f + tick.gamma * np.sqrt(g) * e[:, tick.sector] + tick.delta * np.sqrt(k) * u


def _shocks(t: int, n: int, tick: _Tickers, model: MarketModel, rng: np.random.Generator, session, first):
    """Bar shocks x [T, N], overnight gap shocks [T, N] (zero but on a session's first
    bar) and the regime volatility sqrt(beta^2 h + gamma^2 g + delta^2 k) [T, N]."""
    n_sessions = int(session[-1]) + 1
    f = rng.standard_normal((t, 1))
    e = _unit_shocks(rng, (t, model.n_sectors), model.tail_df)
    u = _unit_shocks(rng, (t, n), model.tail_df)
    h = _garch(_session_shock(f, session, n_sessions), model)[session]  # [T, 1]
    g = _garch(_session_shock(e, session, n_sessions), model)[session][:, tick.sector]  # [T, N]
    k = _garch(_session_shock(u, session, n_sessions), model)[session]  # [T, N]
    x = _combine(tick, f, e, u, h, g, k)
    m = int(first.sum())
    gap = np.zeros((t, n))
    gap[first] = _combine(
        tick,
        rng.standard_normal((m, 1)),
        rng.standard_normal((m, model.n_sectors)),
        rng.standard_normal((m, n)),
        h[first],
        g[first],
        k[first],
    )
    regime = np.sqrt(tick.beta**2 * h + tick.gamma**2 * g + tick.delta**2 * k)
    return x, gap, regime


def _unit_shocks(rng: np.random.Generator, shape: tuple[int, int], tail_df: float | None) -> np.ndarray:
    """Unit-variance shocks: standard normal, or Student-t with `tail_df` degrees of freedom scaled
    by sqrt((df - 2) / df)."""
    if tail_df is None:
        return rng.standard_normal(shape)
    return rng.standard_t(tail_df, shape) * math.sqrt((tail_df - 2.0) / tail_df)


def _stochastic_vol(t: int, n: int, step: int, model: MarketModel, rng: np.random.Generator) -> np.ndarray:
    """Intraday log-normal volatility multipliers [T, N] with E[v^2] = 1 (AR(1) in log)."""
    if model.sv_std <= 0:
        return np.ones((t, n))
    phi = 0.5 ** (step / model.sv_halflife_minutes)
    innovation = rng.standard_normal((t, n)) * model.sv_std * math.sqrt(1.0 - phi * phi)
    innovation[0] = rng.standard_normal(n) * model.sv_std  # start in the stationary law
    log_vol = lfilter([1.0], [1.0, -phi], innovation, axis=0)
    return np.exp(log_vol - model.sv_std**2)


def _time_factor(q_session: np.ndarray, tick: _Tickers, edge: np.ndarray, model: MarketModel) -> tuple[float, float]:
    """tau (the oracle's daily mean per unit signal-to-noise, in daily-sd units) and rho.

    A regular session's drift accrues as sum_t sqrt((1 - o) q_t) E[sqrt G] E[v] while
    its variance is 1 (intraday plus overnight, in units of the daily variance).
    G = beta^2 h + gamma^2 g + delta^2 k mixes independent GARCH multipliers, so
    Var[G] = (beta^4 + gamma^4 + delta^4) Var[h] and E[sqrt G] ~ 1 - Var[G] / 8 (delta
    method). rho = Var[common part of sqrt G] / E[sqrt G]^2 is the day-to-day
    variation of the oracle's daily mean: only the market regime h is common to the
    edge tickers, so rho ~ mean(beta^2)^2 Var[h] / 4 / E[sqrt G]^2.
    """
    var_h = garch_variance(model.garch_alpha, model.garch_beta)
    b, g, d = tick.beta[edge] ** 2, tick.gamma[edge] ** 2, tick.delta[edge] ** 2
    mean_sqrt = float(np.mean(1.0 - (b * b + g * g + d * d) * var_h / 8.0))
    mean_v = math.exp(-0.5 * model.sv_std**2) if model.sv_std > 0 else 1.0
    tau = math.sqrt(1.0 - model.overnight_share) * float(np.sqrt(q_session).sum()) * mean_sqrt * mean_v
    rho = float(np.mean(b)) ** 2 * var_h / 4.0 / mean_sqrt**2
    return tau, rho


def edge_snr(spec: EdgeSpec, tick: _Tickers, q_session: np.ndarray, model: MarketModel) -> float:
    """Per-bar signal-to-noise a that gives the oracle the spec's annual Sharpe.

    SR_day = a c tau / sqrt(1 + (a c tau)^2 rho) (the daily mean varies with the
    market's volatility regime), solved for a with SR_day = SR / sqrt(252); c from
    `cross_section_factor`, tau and rho from `_time_factor`.
    """
    if spec.strength_sharpe == 0:
        return 0.0
    layout = edge_layout(spec, len(tick.vol))
    c = cross_section_factor(layout, tick.correlation(), tick.vol)
    tau, rho = _time_factor(q_session, tick, layout.edge, model)
    sr_day = spec.strength_sharpe / math.sqrt(TRADING_DAYS)
    if sr_day * sr_day * rho >= 1.0:
        raise ConfigError(f"edge strength_sharpe {spec.strength_sharpe} is beyond what this model can calibrate")
    mean_day = sr_day / math.sqrt(1.0 - sr_day * sr_day * rho)
    return mean_day / (c * tau)


def _ticker_names(n: int) -> list[str]:
    width = max(3, len(str(n - 1)))
    return [f"SYN{i:0{width}d}" for i in range(n)]


def synthetic(
    n_tickers: int = 100,
    start="2023-01-03",
    end="2024-01-01",
    seed: int = 0,
    interval: str = "1min",
    edge: EdgeSpec | dict | None = None,
    name: str = "synthetic",
    model: MarketModel | dict | None = None,
) -> MarketData:
    """A seeded synthetic market as `MarketData` (built through `from_frame`).

    :param n_tickers: number of tickers, named SYN000, SYN001, ...
    :param start: first session date (inclusive).
    :param end: last date (exclusive).
    :param seed: the seed; the same arguments give identical data.
    :param interval: "1min" (default), "Nmin", "Nh" or "1D" (stamped at bar open).
    :param edge: an `EdgeSpec` (or a dict of its fields) to plant a known edge.
    :param name: the data set's name.
    :param model: market parameters (a `MarketModel` or a dict of its fields); defaults when None.
    :returns: the panel, with `meta["edge"]` and `meta["edge_tickers"]` when an edge is planted.
    """
    if not isinstance(n_tickers, int) or n_tickers < 1:
        raise ConfigError(f"n_tickers must be a positive integer, got {n_tickers!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    model = as_market_model(model)
    spec = as_edge_spec(edge)
    frame, benchmark, layout = generate_frame(n_tickers, start, end, seed, interval, spec, model)
    data = from_frame(frame, benchmark, name=name, benchmark_name=BENCHMARK_NAME, source="synthetic")
    meta = {"source": "synthetic", "seed": seed, "n_tickers": n_tickers}
    if spec is not None:
        meta["edge"] = spec.to_dict()
        meta["edge_tickers"] = [data.tickers[i] for i in layout.edge]
        meta["edge_leaders"] = [data.tickers[i] for i in layout.leaders]
    data.meta.update(meta)
    return data


def generate_frame(n, start, end, seed, interval, spec, model):
    """The raw market before validation: the long OHLCV frame, the benchmark series and
    the edge layout (None without an edge). `synthetic` passes the frame through
    `from_frame`; `git show 6bc7c2a:benchmarks/synthetic_build.py` timed the two steps apart."""
    step = bar_minutes(interval)
    stamps, session, time_of_day = session_bars(start, end, interval)
    t = len(stamps)
    first = np.r_[False, session[1:] != session[:-1]]
    rng = np.random.default_rng(seed)
    tick = _draw_tickers(n, model, rng)
    x, gap_x, regime = _shocks(t, n, tick, model, rng, session, first)
    v = _stochastic_vol(t, n, step or 390, model, rng)

    bars_per_session = 1 if step is None else -(-390 // step)
    regular = (np.arange(bars_per_session) + 0.5) / bars_per_session
    if step is None:
        profile, norm = np.ones(t), 1.0
    else:
        profile = intraday_profile(time_of_day, model)
        norm = float(np.mean(intraday_profile(regular, model) ** 2))
    q = profile**2 / (norm * bars_per_session)  # share of a session's intraday variance [T]
    q_session = (intraday_profile(regular, model) ** 2 if step else np.ones(1)) / (norm * bars_per_session)
    daily_sd = tick.vol / math.sqrt(TRADING_DAYS)
    bar_sd = daily_sd * np.sqrt((1.0 - model.overnight_share) * q)[:, None]  # [T, N]
    intra = model.annual_drift / TRADING_DAYS / bars_per_session + bar_sd * v * x
    gap = daily_sd * math.sqrt(model.overnight_share) * gap_x

    layout = None
    if spec is not None:
        layout = edge_layout(spec, n)
        snr = edge_snr(spec.regime(False), tick, q_session, model)
        after = None
        if spec.shift is not None:
            later = spec.regime(True)
            snr_after = edge_snr(later, tick, q_session, model)
            after = Regime(spec.shift.first_bar(stamps), later.horizon, edge_layout(later, n).sign, snr_after)
        if snr > 0 or (after is not None and after.snr > 0):
            v_known = np.vstack([np.ones((1, n)), v[:-1]])  # the volatility known before each bar
            scale = (bar_sd * regime * v_known)[:, layout.edge]
            EdgePlanter(layout, spec.horizon, snr, after).plant(intra, gap, scale)

    log_close = np.log(tick.price) + np.cumsum(intra + gap, axis=0)
    share = _volume_share(profile, regular, model, step)
    frame = _assemble(stamps, log_close, intra, bar_sd * v * regime, share, tick, x, model, rng)
    return frame, _index(stamps, log_close, tick), layout


def _volume_share(profile: np.ndarray, regular: np.ndarray, model: MarketModel, step: int | None) -> np.ndarray:
    """Each bar's share of a regular session's volume [T] (U-shaped, sums to 1 a session)."""
    if step is None:
        return np.ones_like(profile)
    return profile**1.5 / float(np.sum(intraday_profile(regular, model) ** 1.5))


def _assemble(stamps, log_close, intra, bar_vol, share, tick, x, model, rng) -> pd.DataFrame:
    """The long frame: timestamp, ticker, open, high, low, close, volume.

    Each bar opens at the previous close moved by the overnight gap (zero within a
    session), so open = close - intrabar return in logs.
    """
    t, n = intra.shape
    log_open = log_close - intra
    wick = 0.5 * bar_vol
    log_high = np.maximum(log_open, log_close) + wick * np.abs(rng.standard_normal((t, n)))
    log_low = np.minimum(log_open, log_close) - wick * np.abs(rng.standard_normal((t, n)))
    surprise = model.volume_kappa * (np.abs(x) - math.sqrt(2.0 / math.pi))
    noise = model.volume_noise * rng.standard_normal((t, n)) - 0.5 * model.volume_noise**2
    volume = np.maximum(1.0, np.round(tick.volume * share[:, None] * np.exp(surprise + noise)))
    if model.half_spread_bps > 0:  # trades at the bid or the ask around the mids above
        half = math.log1p(model.half_spread_bps * 1e-4)
        log_open = log_open + half * rng.choice((-1.0, 1.0), size=(t, n))
        log_close = log_close + half * rng.choice((-1.0, 1.0), size=(t, n))
        log_high, log_low = log_high + half, log_low - half
    names = np.asarray(_ticker_names(n), dtype=object)
    return pd.DataFrame(
        {
            "timestamp": stamps.repeat(n),
            "ticker": pd.Categorical.from_codes(np.tile(np.arange(n), t), categories=names),
            "open": np.exp(log_open).reshape(-1),
            "high": np.exp(log_high).reshape(-1),
            "low": np.exp(log_low).reshape(-1),
            "close": np.exp(log_close).reshape(-1),
            "volume": volume.reshape(-1),
        }
    )


def _index(stamps, log_close, tick) -> pd.Series:
    """The cap-weighted index of the tickers (fixed shares), 100 at the start."""
    value = np.exp(log_close) @ tick.shares
    return pd.Series(100.0 * value / float(tick.price @ tick.shares), index=stamps, name=BENCHMARK_NAME)
