"""The application floor: the `trader` CLI, the experiment protocols (walk-forward, the seed
paper's experiment, the demo) and paper trading.

It drives the floors below it (market_envs, trader's core, tournament) and nothing below imports
it back (tests/test_imports.py); the dashboards sit on this floor beside it."""
