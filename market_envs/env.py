"""`StockTradingVecEnv`: E trading sub-environments over N stocks, batched on one device.

Every piece of state is a tensor on the env's device (CPU or CUDA); a step is a fixed number of
tensor operations whatever E and N are. The rules (timing, fills, costs, cash, rewards, resets,
the observation layout) are stated once, in words, in `market_envs.config` beside `EnvConfig`;
the per-bar tables are `market_envs.tables`; the step kernel is `market_envs.kernel`.

Speed: on the CPU, observations are written into buffers the env recycles once the
caller no longer references them (see `RecyclingBuffers`); ``compile=True`` fuses
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
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from torch import Tensor

from market_envs.config import EnvConfig
from market_envs.costs import TRADING_DAYS, bars_per_day, check_costs_for_data
from market_envs.data.panel import MarketData
from market_envs.devices import resolve_device
from market_envs.errors import ConfigError, UserError
from market_envs.fill import fill_costs, within_cash
from market_envs.fill_inputs import fill_rules, market_tables
from market_envs.kernel import (
    Pace,
    RecyclingBuffers,
    Rules,
    State,
    account_columns,
    compiled_step_kernel,
    fresh_account,
    mapping_rules,
    observe,
    orders,
    pace_of,
    read_actions,
    step_kernel,
    table_shapes,
    toward_zero,
)
from market_envs.streams import RowStreams
from market_envs.tables import Tables, default_features, observed_feature_table, shared_tables, turbulence_table


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
        self.tables = shared_tables(data, (self.device, config), self._build_tables)
        """The per-bar tables the step reads (observations, prices, masks, cost terms), shared by
        envs of the same data, device and rules; `market_envs.rollout` steps them too."""
        leavers = self.tables.reducible is not None
        costs = config.costs
        terms = costs.terms()
        self.rules = Rules(
            **mapping_rules(config, self.num_stocks),
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
        pace = pace_of(config, self.rules, self.num_envs, self.device)
        if pace is not None:
            self.tables = self.tables._replace(trade_rate=pace.rate, band=pace.band)
        self.compiled = bool(compile)
        shapes = (self.num_envs, *table_shapes(self.tables))
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
        self._row_streams: RowStreams | None = None
        self._state: State | None = None
        shape = (self.num_envs, self.obs_dim)
        self._obs_buffers = RecyclingBuffers(shape, torch.float32, self.device)
        self._final_obs_buffers = RecyclingBuffers(shape, torch.float32, self.device)

    # ------------------------------------------------------------------ set-up
    def _build_tables(self) -> Tables:
        data, n = self.data, self.num_stocks
        obs = torch.zeros((self.num_bars, self.obs_dim), dtype=torch.float32, device=self.device)
        # the features are written straight into the table: no second [T, N, F] copy at construction
        observed_feature_table(data, self.config, out=obs[:, 1 + n :].view(self.num_bars, n, -1))
        if self.config.turbulence_threshold is None:
            guard = torch.zeros(self.num_bars, dtype=torch.bool, device=self.device)
        else:
            guard = turbulence_table(data, self.config.turbulence_window) > self.config.turbulence_threshold
        return Tables(
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
    def require_reset(self) -> State:
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
    def use_row_streams(self, streams: RowStreams) -> None:
        """Draw the random starts of each block of rows from its own stream: rows
        ``[p * E, (p + 1) * E)`` from stream p, E = ``num_envs / streams.rows``. A pod group's env
        holds P pods' E rows each this way, and pod p's rows start where a lone env of E rows with
        stream p alone would start them, whatever the other pods are (`market_envs.streams`).
        ``reset`` then takes no ``seed``: the streams are seeded."""
        if streams.rows < 1 or self.num_envs % streams.rows:
            raise ConfigError(
                f"StockTradingVecEnv.use_row_streams: {streams.rows} streams do not divide {self.num_envs} rows"
            )
        if streams.device != self.device:
            raise ConfigError(f"StockTradingVecEnv.use_row_streams: streams on {streams.device}, env on {self.device}")
        self._row_streams = streams

    def _draw_starts(self) -> tuple[Tensor, Tensor]:
        streams = self._row_streams
        if streams is not None and self.config.random_start and self._last_start > 0:
            start = streams.integers(self._last_start + 1, (self.num_envs // streams.rows,)).reshape(-1)
        elif self.config.random_start and self._last_start > 0:
            start = torch.randint(
                0, self._last_start + 1, (self.num_envs,), generator=self._generator, device=self.device
            )
        else:
            start = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        return start, (start + self._episode_steps).clamp_max(self.num_bars - 1)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """Start a new episode in every sub-environment.

        :param seed: reseeds the env's own ``torch.Generator`` (random starts; refused after
            `use_row_streams`, whose streams are seeded instead); the
            same seed gives the same starts and, with the same actions, the same run.
        :param options: None, or a starting book instead of all cash: ``{"cash": [E],
            "holdings": [E, N]}`` (float tensors; shares per stock), marked at each start
            bar's close. A walk-forward fold's policy takes over the previous fold's book
            this way. Episodes that end later restart from ``initial_cash`` as usual.
            ``"start": t`` (an int) starts every sub-environment at bar t instead
            (`trader act` decides at a chosen bar this way).
        :returns: obs float32 [E, obs_dim] and info with ``t`` [E] (the start bars).
        """
        if seed is not None and self._row_streams is not None:
            raise UserError("StockTradingVecEnv.reset: this env draws its starts from row streams; seed those instead")
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
        self._state = State(t=start, end=end, cash=cash, holdings=holdings, value=cash.clone())
        account = fresh_account(self.tables.obs[:1, : 1 + self.num_stocks]).expand(self.num_envs, -1)
        return observe(self.tables, start, account, self._obs_buffers.take()), {"t": start}

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
        self._state = State(t=start, end=end, cash=cash, holdings=holdings, value=value)
        account = account_columns(cash, holdings, value, close, self.rules)
        return observe(self.tables, start, account, self._obs_buffers.take()), {"t": start}

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
        actions, rates = read_actions(actions.to(self.device), self.rules, torch.float64)
        price = price.to(self.device, torch.float64).expand_as(state.holdings)
        pace = Pace(self.tables.trade_rate, self.tables.band) if (self.rules.has_rate or self.rules.has_band) else None
        sells, buys = orders(actions, state.holdings, price, state.cash, self.rules, pace, rates)
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
        info["final_obs"] = observe(self.tables, info["t"], final_account, self._final_obs_buffers.take())
        obs = observe(self.tables, self._state.t, account, self._obs_buffers.take())
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
