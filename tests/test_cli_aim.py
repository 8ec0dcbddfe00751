"""`--trade-rate`, `--no-trade-band`, `--weights-map` on `trader train` and `trader tournament`:
bad values and the new action in shares mode are one line and exit code 2, before any training."""

from __future__ import annotations

import pytest

from trader.cli import main


@pytest.mark.parametrize("command", [["train", "--algo", "ppo", "--run-dir"], ["tournament"]])
@pytest.mark.parametrize(
    ("flags", "fragment"),
    [(["--trade-rate", "1.5"], "--trade-rate must be in [0, 1]"),
     (["--trade-rate", "-0.2", "--preset", "market"], "--trade-rate must be in [0, 1]"),
     (["--no-trade-band", "-0.01", "--preset", "market"], "--no-trade-band must be a weight >= 0"),
     (["--weights-map", "log", "--preset", "market"], "--weights-map must be one of normalized, linear"),
     (["--trade-rate", "0.5"], "--trade-rate: the aim, trade rate and band move a book of target weights"),
     (["--no-trade-band", "0.01"], "--no-trade-band: the aim, trade rate and band move a book of target weights")],
)  # fmt: skip
def test_bad_aim_flags_exit_2_with_one_line(command, flags, fragment, tmp_path, capsys):
    args = [*command, str(tmp_path / "run"), "--dataset", "synthetic-edge-daily", *flags]
    if command[0] == "train":
        args += ["--steps", "64"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run" / "config.toml").exists()
