"""Other libraries' saved policies as our ``act(obs, deterministic)``: Stable-Baselines3's model
files (`trader.adapters.sb3`) and RLlib's exported actor MLP (`trader.adapters.mlp`).

They sit below the backtest engine, which runs them (`trader.backtesting.baseline_folder`), and
below the libraries' training code (`trader.libraries`), which writes them.
"""
