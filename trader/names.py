"""Names and defaults that commands declare their options with, kept light.

`trader --help` builds every command's options before any command runs, so what the
options show (the algorithm names, the backtest's baseline names, the demo's
defaults) must be importable without torch, scipy or the data providers. This module
imports nothing; the heavy packages import these names from here, so each has one
home:

- `ALGOS`: the algorithms the registry builds (`trader.agents.SPEC_MODULES`);
- `BASELINES`: the backtest's built-in strategies (`trader.backtesting.engine`);
- `DEMO_RECIPE`, `DEMO_COST`, `DEMO_POD_STEPS`: what `trader demo` runs by default
  (`trader.app.demo`); `PRESET_COST`: the rate of ``--preset market`` without ``--commission``.

`tests/test_cli_startup.py` checks that the lists equal what the registries know.
"""

from __future__ import annotations

ALGOS = ("ppo", "sac", "td3")
"""The algorithms, in the order the CLI lists them; one registry entry each."""

BASELINES = ("benchmark", "equal_weight", "equal_weight_daily", "oracle", "oracle_costs")
"""Names of the built-in baseline strategies ("oracle" and "oracle_costs", the planted rule traded
through the trade rate or no-trade band that suits the cost model: data sets with a planted edge only)."""

DEMO_RECIPE = "synthetic-edge-daily"
"""The demo's data set: a market with a planted edge that survives the demo's costs."""

DEMO_COST = 0.0005
"""Costs per side, in training, selection and the backtest: 5 bp, what the default
recipe's edge is built to survive."""

PRESET_COST = 0.0005
"""The commission rate per side of ``--preset market`` when no ``--commission`` is given (5 bp;
`trader train`, `trader tournament`, `trader walkforward`)."""

DEMO_POD_STEPS = 16_384
"""Transitions per pod: short enough that a 3-minute tournament on a 2-core machine
finishes several pods and breeds children from the first ones, so the demo shows the
tournament's selection at work rather than a single generation (benchmarks/RESULTS.md,
"make demo", has the pods finished at this length and at twice it)."""
