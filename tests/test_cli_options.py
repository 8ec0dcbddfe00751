"""No option is accepted and ignored: every option of every command is listed below with
where it acts; in the combinations where it would do nothing it is refused with one
line and exit code 2, before any work. A new option fails the walk until it is listed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import typer

from market_envs.config import EnvConfig
from trader import rundir
from podracer.cli import app, main
from trader.errors import UserError

ACTS = "acts"
"""An option that acts in every combination the command accepts."""

OPTIONS: dict[str, dict[str, str]] = {
    "train": {
        "run_dir": ACTS,
        "--algo": ACTS,
        "--env": ACTS,
        "--dataset": ACTS,
        "--steps": ACTS,
        "--seed": ACTS,
        "--device": ACTS,
        "--num-envs": ACTS,
        "--eval-every": ACTS,
        "--config": ACTS,
        "--compile": ACTS,
        "--population": "PPO on a market: refused with another algorithm, --env, --resume and --compile",
        "--eval-episodes": "gymnasium envs only: refused with --dataset",
        "--preset": "market only: refused with --env",
        "--commission": "market only, with or without --preset; refused with --env and with --costs",
        "--costs": "market only: refused with --env",
        "--cost-set": "refused without --costs",
        "--overwrite": ACTS,
        **{
            o: "market weights mode only: refused with --env and for rules in shares mode"
            for o in ("--trade-rate", "--no-trade-band", "--weights-map")
        },
        "--initial-cash": "market only: refused with --env",
        "--resume": "refused beside --config, --overwrite and the rules' flags, and beside a flag that contradicts "
        "the run's config.toml",
        "--verbose": ACTS,
    },
    "backtest": {
        "run_dir": ACTS,
        "--dataset": ACTS,
        "--period": ACTS,
        "--strategies": ACTS,
        "--output": ACTS,
        "--initial-cash": ACTS,
        "--commission": "refused with --costs",
        "--costs": ACTS,
        "--cost-set": "refused without --costs",
        "--breakeven": ACTS,
        "--device": ACTS,
        "--tear-sheet": ACTS,
        "--report": ACTS,
        "--overwrite": ACTS,
    },
    "demo": {
        o: ACTS
        for o in (
            "run_dir",
            "--dataset",
            "--minutes",
            "--workers",
            "--pods",
            "--pod-steps",
            "--group-size",
            "--commission",
            "--seed",
            "--device",
            "--tear-sheet",
        )
    },
    "tournament": {
        "run_dir": ACTS,
        "--dataset": ACTS,
        "--env": ACTS,
        "--config": ACTS,
        "--resume": ACTS,
        **{
            o: "with --resume: refused unless it repeats the saved value"
            for o in (
                "--algos",
                "--population",
                "--pod-steps",
                "--num-envs",
                "--group-size",
                "--seed",
                "--compile",
                "--search",
                "--ensemble-weighting",
            )
        },
        "--pods": ACTS,
        "--time-budget": ACTS,
        "--target-score": ACTS,
        "--workers": "refused with --scheduler or --gpus",
        "--scheduler": ACTS,
        "--tls-ca": "needs a tls:// --scheduler",
        "--tls-cert": "needs a tls:// --scheduler",
        "--tls-key": "needs a tls:// --scheduler",
        "--insecure": "refused without --scheduler",
        "--gpus": ACTS,
        "--device": "refused with --gpus",
        "--preset": "market only: refused with --env",
        "--commission": "refused with --costs and with --env",
        "--costs": "refused with --env",
        "--cost-set": "refused without --costs",
        **{
            o: "market weights mode only: refused with --env and for rules in shares mode"
            for o in ("--trade-rate", "--no-trade-band", "--weights-map")
        },
        "--initial-cash": "market only: refused with --env",
    },
    "dashboard": {"runs_dir": ACTS, "--port": ACTS, "--host": ACTS},
    "act": {
        o: ACTS for o in ("run_dir", "--at", "--book", "--strategy", "--period", "--dataset", "--output", "--device")
    },
    "baselines": {
        "run_dir": ACTS,
        "--baselines": ACTS,
        "--steps": ACTS,
        "--time-budget": ACTS,
        "--seeds": ACTS,
        "--dataset": ACTS,
        "--device": ACTS,
        "--backtest": ACTS,
        "--costs": ACTS,
        "--cost-set": "refused without --costs",
        "--overwrite": ACTS,
        "--baseline-algos": "sb3, sb3-dummy, rllib only",
        "--hyperparameters": "sb3, sb3-dummy only",
        "--num-envs": "sb3, sb3-dummy, finrl only",
        "--eval-every": "sb3, sb3-dummy, rllib only",
        "--windows": "finrl only",
        "--tear-sheet": "refused with --no-backtest",
        "--output": "refused with --no-backtest",
    },
    "walkforward": {
        "run_dir": ACTS,
        "--dataset": "required: refused when missing",
        "--train": ACTS,
        "--validation": ACTS,
        "--test": ACTS,
        "--step": ACTS,
        "--expanding": ACTS,
        "--embargo": ACTS,
        "--learner": ACTS,
        "--seed": ACTS,
        "--device": "refused with --gpus",
        "--num-envs": ACTS,
        "--compile": ACTS,
        "--warm-start": ACTS,
        "--preset": ACTS,
        "--commission": "refused with --costs",
        "--costs": ACTS,
        "--cost-set": "refused without --costs",
        "--baselines": ACTS,
        **{
            o: "single learner only: refused with --learner tournament" for o in ("--steps", "--eval-every", "--config")
        },
        **{
            o: "--learner tournament only"
            for o in (
                "--algos",
                "--population",
                "--pod-steps",
                "--pods",
                "--time-budget",
                "--target-score",
                "--search",
                "--ensemble-weighting",
                "--gpus",
                "--scheduler",
            )
        },
        "--workers": "--learner tournament only; refused with --scheduler or --gpus",
        **{o: "--learner tournament only, with a tls:// --scheduler" for o in ("--tls-ca", "--tls-cert", "--tls-key")},
        "--insecure": "--learner tournament only, with --scheduler",
        **{
            o: "market weights mode only: refused for rules in shares mode"
            for o in ("--trade-rate", "--no-trade-band", "--weights-map")
        },
        "--baseline-algos": "with --baselines sb3 or sb3-dummy only",
        "--baseline-steps": "with --baselines only",
        "--initial-cash": ACTS,
    },
    "data list": {},
    "data build": {"recipe": ACTS, "--data-dir": ACTS, "--refresh": ACTS, "--set": ACTS},
    "data info": {"recipe": ACTS, "--data-dir": ACTS, "--set": ACTS},
    "data validate": {"path": ACTS, "--assume-tz": ACTS, "--benchmark": ACTS, "--tickers": ACTS},
    "cluster certs": {"folder": ACTS, "--hosts": ACTS, "--days": ACTS},
    "paper": {
        **{
            o: ACTS
            for o in (
                "run_dir",
                "--broker",
                "--max-bars",
                "--quiet",
                "--max-order-value",
                "--max-gross-exposure",
                "--daily-loss-limit",
                "--max-drawdown",
                "--cash-tolerance",
                "--dataset",
                "--device",
            )
        },
        "--flatten-before-close": "intraday bars only: refused for daily bars (podracer.paper)",
        "--period": "--broker replay only: refused with alpaca",
        **{
            o: "--broker alpaca only: refused with replay"
            for o in (
                "--broker-url",
                "--data-url",
                "--feed",
                "--dry-run",
                "--fill-timeout",
                "--send-window",
                "--poll",
                "--backoff",
            )
        },
    },
    "experiment podracer": {
        **{
            o: ACTS
            for o in (
                "run_dir",
                "--dataset",
                "--pod-steps",
                "--workers",
                "--years",
                "--commission",
                "--preset",
                "--extra-costs",
                "--baselines",
                "--snapshot-every",
                "--seed",
                "--device",
            )
        },
        "--minutes": "refused with --pods (tests/test_experiment.py)",
        "--pods": "refused with --minutes",
        "--tickers": "synthetic data sets only: refused otherwise (tests/test_experiment.py)",
    },
}
"""Every command's options, each with where it acts (the refusals are tested below)."""


def command_params() -> dict[str, list]:
    """Every `trader` command (``data build`` for a group's) and its click parameters."""
    found = {}

    def walk(node, prefix: str) -> None:
        if hasattr(node, "commands"):
            for name, sub in node.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            found[prefix] = list(node.params)

    walk(typer.main.get_command(app), "")
    return found


def commands() -> dict[str, list[str]]:
    """Every `trader` command and its parameters' names (an option's first flag, an argument's name)."""
    return {
        command: [param.opts[0] if param.opts[0].startswith("-") else param.name for param in params]
        for command, params in command_params().items()
    }


def test_every_option_of_every_command_is_accounted_for() -> None:
    found = commands()
    assert set(found) == set(OPTIONS), "a command was added or removed: list its options in OPTIONS"
    for command, params in found.items():
        assert set(params) == set(OPTIONS[command]), (command, set(params) ^ set(OPTIONS[command]))


# ------------------------------------------------------------------ one grammar: shared options, RUN_DIR first

ANOTHER_MEANING = {
    ("train", "--population"): "train: P seeds side by side as one pod group (issue 77's name); the tournament's "
    "commands: its leaderboard size",
}
"""A shared option's name that one command uses for something else, each with why."""
DIFFERS = {
    "--config": "train, walkforward: algo config keys; tournament: tournament keys",
    "--env": "train: the env trained on; tournament: each pod's",
    "--eval-every": "one learner's validations; baselines: SB3's (its help names the libraries)",
    "--steps": "train: the run's; walkforward: per fold; baselines: per learner",
    "--pods": "tournament: its budget; walkforward: per fold; demo: an extra stop; experiment: equal work",
    "--pod-steps": "the demo and the experiment have their own defaults (a 3-minute run; the paper's)",
    "--time-budget": "tournament: its own; walkforward: per fold; baselines: per learner",
    "--minutes": "demo: the tournament's budget; experiment: each learner's",
    "--output": "baselines: refused with --no-backtest, so its default is None",
    "--overwrite": "what is replaced: a run, a report, a baseline",
    "--resume": "what is continued: a training run (its help says what is not restored), a tournament",
    "--period": "backtest: traded; act: observed; paper: replayed",
    "--tear-sheet": "baselines: refused with --no-backtest, so its default is None",
    "--tickers": "data validate: tickers that must be present; experiment: a synthetic data set's size",
    "--set": "data info says 'as for build'",
}
"""Option names that two commands take with another help or default, and why. A name not here
that several commands take is one option: the same help and default everywhere."""


def shared_declarations() -> dict[str, object]:
    """`podracer.cli.options.SHARED` by flag: each one's typer `OptionInfo`."""
    from podracer.cli.options import SHARED

    declared = {}
    for alias in SHARED:
        info = alias.__metadata__[0]
        declared[info.default.split("/")[0]] = info  # in Annotated, the first flag is the default slot
    return declared


def test_a_shared_option_has_one_help_and_one_default_on_every_command() -> None:
    declared = shared_declarations()
    assert {
        "--dataset",
        "--device",
        "--seed",
        "--num-envs",
        "--costs",
        "--commission",
        "--compile",
        "--scheduler",
        "--tls-ca",
        "--tls-cert",
        "--tls-key",
        "--insecure",
    } <= set(declared)
    seen: dict[str, dict[str, tuple]] = {}
    for command, params in command_params().items():
        for param in params:
            if param.opts[0].startswith("-"):
                seen.setdefault(param.opts[0], {})[command] = (param.help, repr(param.default), param.opts)
    for flag, info in declared.items():
        assert len(seen.get(flag, {})) >= 2, f"{flag} is declared shared but {sorted(seen.get(flag, {}))} take it"
        for command, (help_text, default, opts) in seen[flag].items():
            if (command, flag) in ANOTHER_MEANING:
                continue
            assert help_text == info.help, f"trader {command} {flag}: its own help text, not the shared one"
            assert default == ("[]" if flag == "--cost-set" else "False" if flag == "--insecure" else "None"), (
                command,
                flag,
            )
    for flag, by_command in seen.items():
        by_command = {command: v for command, v in by_command.items() if (command, flag) not in ANOTHER_MEANING}
        if len(by_command) > 1 and flag not in DIFFERS:
            assert len({(h, d) for h, d, _ in by_command.values()}) == 1, f"{flag} differs across {sorted(by_command)}"
    assert "--cost" not in seen and "--run-dir" not in seen  # the old dialects are gone
    assert not set(DIFFERS) & set(declared) and set(DIFFERS) <= set(seen)


def test_run_dir_is_the_first_argument_of_every_command_on_a_run() -> None:
    for command, params in command_params().items():
        names = [param.name for param in params]
        if "run_dir" in names:
            assert names[0] == "run_dir" and not params[0].opts[0].startswith("-"), command
    assert {c for c, params in command_params().items() if params and params[0].name == "run_dir"} >= {
        "train",
        "demo",
        "backtest",
        "tournament",
        "walkforward",
        "baselines",
        "act",
        "paper",
        "experiment podracer",
    }


def parses(text: str, fill: dict[str, str]) -> None:
    """``trader ...`` parses with the CLI's own parser (a group's command with its own): raises
    click's UsageError, or fails an assertion, when it does not."""
    import click

    group = typer.main.get_command(app)
    words = [fill.get(word, word) for word in text.split()[1:]]
    command = group.get_command(click.Context(group), words[0])
    assert command is not None, f"`{text}` names no command"
    while hasattr(command, "list_commands") and len(words) > 1 and not words[1].startswith("-"):
        words = words[1:]
        command = command.get_command(click.Context(command), words[0])
        assert command is not None, f"`{text}` names no command"
    command.make_context(words[0], words[1:])


def readme_commands(text: str | None = None) -> list[str]:
    """The ``trader ...`` lines of the bash blocks (continuations joined, comments cut) of the
    README and of the docs site's guides (``docs/*.md``; the README's former sections live there),
    and the commands of their tables' cells (the Python API beside the CLI); of ``text`` alone if
    given (a part of one page). The reference pages are left out: their tables name a command as
    the writer of a file, not as a line to paste."""
    import re

    root = Path(__file__).parents[1]
    if text is None:
        guides = [p for p in sorted((root / "docs").glob("*.md")) if p.name not in ("contracts.md", "configuration.md")]
        texts = [page.read_text() for page in [root / "README.md", *guides]]
    else:
        texts = [text]
    found = []
    for text in texts:
        for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if line.startswith("trader "):
                    found.append(line)
        for row in re.findall(r"^\|.*\|$", text, re.MULTILINE):
            found += re.findall(r"`(trader [^`]+)`", row)
    return found


def test_every_command_the_readme_shows_parses(tmp_path: Path) -> None:
    shown = readme_commands()
    assert len(shown) >= 15 and any(line.startswith("trader train ") for line in shown)
    for line in shown:
        parses(line, {"RUN_DIR": str(tmp_path / "run")})


def test_the_old_flags_are_refused_by_name(capsys) -> None:
    """``--run-dir`` and ``--cost`` are gone: click names them, exit code 2, no run started."""
    assert main(["train", "--run-dir", "runs/x", "--algo", "ppo"]) == 2
    assert "--run-dir" in capsys.readouterr().err
    assert main(["backtest", "runs/x", "--cost", "0.001"]) == 2
    assert "--cost" in capsys.readouterr().err


def exits_2(argv: list[str], capsys, message: str) -> None:
    assert main(argv) == 2, argv
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1, captured
    assert captured.err.startswith("error: ") and message in captured.err, captured.err


TRAIN = ["train", "RUN", "--algo", "ppo"]
TOURNAMENT_GYM = ["tournament", "RUN", "--env", "Pendulum-v1"]
WALK = [
    "walkforward",
    "RUN",
    "--dataset",
    "synthetic-edge-daily",
    "--train",
    "3y",
    "--validation",
    "1y",
    "--test",
    "1y",
]

REFUSED = [
    # trader train
    (
        [*TRAIN, "--dataset", "synthetic-edge-daily", "--eval-episodes", "3"],
        "--eval-episodes applies to gymnasium envs",
    ),
    ([*TRAIN, "--env", "Pendulum-v1", "--commission", "0.01"], "--commission applies to market data sets"),
    ([*TRAIN, "--env", "Pendulum-v1", "--costs", "retail"], "--costs applies to market data sets"),
    ([*TRAIN, "--env", "Pendulum-v1", "--preset", "market"], "--preset applies to market data sets"),
    (
        [*TRAIN, "--dataset", "x", "--commission", "0.01", "--costs", "retail"],
        "give --commission RATE or --costs MODEL, not both",
    ),
    ([*TRAIN, "--dataset", "x", "--cost-set", "participation=0.1"], "--cost-set needs --costs MODEL"),
    # trader backtest
    (
        ["backtest", "RUN", "--commission", "0.01", "--costs", "retail"],
        "give --commission RATE or --costs MODEL, not both",
    ),
    (["backtest", "RUN", "--cost-set", "spread_bps=1"], "--cost-set needs --costs MODEL"),
    # trader tournament
    ([*TOURNAMENT_GYM, "--commission", "0.01"], "--commission applies to market data sets"),
    ([*TOURNAMENT_GYM, "--costs", "retail"], "--costs applies to market data sets"),
    ([*TOURNAMENT_GYM, "--preset", "market"], "--preset applies to market data sets"),
    ([*TOURNAMENT_GYM, "--workers", "2", "--scheduler", "tls://127.0.0.1:8786"], "--workers sets the local cluster's"),
    ([*TOURNAMENT_GYM, "--workers", "2", "--gpus", "all"], "--workers sets the local cluster's"),
    ([*TOURNAMENT_GYM, "--insecure"], "--insecure applies with --scheduler"),
    ([*TOURNAMENT_GYM, "--device", "cpu", "--gpus", "all"], "--gpus runs the pods on cuda"),
    ([*TOURNAMENT_GYM, "--gpus", "0,x"], "--gpus takes 'all' or GPU numbers like 0,1; got '0,x'"),
    ([*TOURNAMENT_GYM, "--gpus", " , "], "--gpus needs at least one GPU number"),
    ([*TOURNAMENT_GYM, "--tls-ca", "ca.pem"], "--tls-ca, --tls-cert and --tls-key need a tls:// --scheduler"),
    # trader baselines
    (
        ["baselines", "RUN", "--baselines", "finrl", "--baseline-algos", "sac"],
        "--baseline-algos applies to sb3, sb3-dummy, rllib",
    ),
    (["baselines", "RUN", "--baselines", "finrl", "--hyperparameters", "finrl"], "--hyperparameters applies to sb3"),
    (
        ["baselines", "RUN", "--baselines", "finrl", "--eval-every", "100"],
        "--eval-every applies to sb3, sb3-dummy, rllib",
    ),
    (["baselines", "RUN", "--baselines", "rllib", "--num-envs", "4"], "--num-envs applies to sb3, sb3-dummy, finrl"),
    (["baselines", "RUN", "--baselines", "sb3", "--windows", "2"], "--windows applies to finrl"),
    (["baselines", "RUN", "--no-backtest", "--no-tear-sheet"], "--tear-sheet and --output apply to the backtest"),
    (["baselines", "RUN", "--no-backtest", "--output", "json"], "--tear-sheet and --output apply to the backtest"),
    # trader paper
    (["paper", "RUN", "--broker", "replay", "--feed", "sip"], "--feed does not apply to --broker replay"),
    (["paper", "RUN", "--poll", "0", "--fill-timeout", "5"], "--fill-timeout, --poll do not apply to --broker replay"),
    (
        ["paper", "RUN", "--send-window", "5", "--backoff", "1"],
        "--send-window, --backoff do not apply to --broker replay",
    ),
    (["paper", "RUN", "--data-url", "http://127.0.0.1:9"], "--data-url does not apply to --broker replay"),
    (["paper", "RUN", "--broker", "alpaca", "--period", "test"], "--period does not apply to --broker alpaca"),
    # trader walkforward
    ([*WALK, "--learner", "tournament", "--steps", "5000"], "--steps and --eval-every apply to a single learner"),
    ([*WALK, "--learner", "tournament", "--eval-every", "500"], "--steps and --eval-every apply to a single learner"),
    ([*WALK, "--learner", "tournament", "--config", "x.toml"], "--config sets a single learner's"),
    ([*WALK, "--learner", "ppo", "--pods", "3"], "--pods applies to --learner tournament"),
    (
        [*WALK, "--learner", "sac", "--scheduler", "tls://127.0.0.1:8786", "--search", "random"],
        "--search, --scheduler apply to --learner tournament",
    ),
    ([*WALK, "--learner", "td3", "--insecure", "--target-score", "1"], "--target-score, --insecure apply to --learner"),
    ([*WALK, "--commission", "0.01", "--costs", "retail"], "give --commission RATE or --costs MODEL, not both"),
    ([*WALK, "--cost-set", "participation=0.1"], "--cost-set needs --costs MODEL"),
    ([*WALK, "--workers", "2", "--gpus", "all"], "--workers sets the local cluster's"),
    ([*WALK, "--device", "cpu", "--gpus", "all"], "--gpus runs the pods on cuda"),
    ([*WALK, "--tls-key", "key.pem"], "--tls-ca, --tls-cert and --tls-key need a tls:// --scheduler"),
    ([*WALK, "--insecure"], "--insecure applies with --scheduler"),
    ([*WALK, "--learner", "ppo", "--trade-rate", "0.5"], "--trade-rate: the aim, trade rate and band move a book"),
    ([w for w in WALK if w not in ("--dataset", "synthetic-edge-daily")], "give --dataset RECIPE"),
    ([*WALK, "--baseline-steps", "100"], "apply with --baselines LIBRARIES"),
    ([*WALK, "--baselines", "finrl", "--baseline-algos", "sac"], "--baseline-algos applies to the sb3"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSED, ids=[" ".join(a[:1] + a[-2:]) for a, _ in REFUSED])
def test_an_option_that_would_do_nothing_is_refused(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    argv = [str(tmp_path / "run") if a == "RUN" else a for a in argv]
    exits_2(argv, capsys, message)
    assert not (tmp_path / "run").exists()  # refused before any work


@pytest.mark.parametrize(
    "old",
    [
        ["--preset", "finrl"],  # SB3's hyperparameters are --hyperparameters; --preset is market rules
        ["--libraries", "sb3"],
        ["--algos", "ppo"],
    ],
)
def test_trader_baselines_refuses_its_old_spellings(old: list[str], tmp_path: Path, capsys) -> None:
    """One name, one meaning: the old spellings of ``--hyperparameters``, ``--baselines`` and
    ``--baseline-algos`` are unknown options (exit code 2), never read with another meaning."""
    assert main(["baselines", str(tmp_path / "run"), *old]) == 2
    assert f"No such option: {old[0]}" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_baselines_and_walkforward_take_one_spelling_of_the_baselines() -> None:
    params = command_params()
    for flag in ("--baselines", "--baseline-algos"):
        assert {c for c, ps in params.items() if any(p.opts[0] == flag for p in ps)} == {
            "baselines",
            "walkforward",
            "experiment podracer",
        } - ({"experiment podracer"} if flag == "--baseline-algos" else set())
    assert not any(p.opts[0] in ("--libraries", "--sb3-preset") for ps in params.values() for p in ps)


# ------------------------------------------------------------------ the combinations the issue found ignored act now


def test_train_commission_without_a_preset_is_the_rate_it_trains_and_reports_at(tmp_path: Path, capsys) -> None:
    from market_fixtures import write_tiny_recipe

    recipe = write_tiny_recipe(tmp_path)
    (tmp_path / "ppo.toml").write_text("num_steps = 16\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\n")
    assert (
        main(
            [
                "train",
                str(tmp_path / "r"),
                "--algo",
                "ppo",
                "--dataset",
                str(recipe),
                "--commission",
                "0.01",
                "--steps",
                "32",
                "--num-envs",
                "2",
                "--eval-every",
                "0",
                "--config",
                str(tmp_path / "ppo.toml"),
            ]
        )
        == 0
    )
    rules = rundir.read_toml(tmp_path / "r" / "config.toml")["env"]["env_config"]
    assert rules["buy_cost"] == rules["sell_cost"] == 0.01


@pytest.fixture
def settings_of_tournament(monkeypatch):
    """`trader tournament` up to its cluster: the resolved `TournamentConfig`, then a stop."""
    from tournament import cluster

    seen = []

    def connect_for(config):
        seen.append(config)
        raise UserError("stopped before the cluster")

    monkeypatch.setattr(cluster, "connect_for", connect_for)
    return seen


def test_tournament_commission_without_a_preset_acts(tmp_path: Path, settings_of_tournament, capsys) -> None:
    from market_fixtures import write_tiny_recipe

    recipe = write_tiny_recipe(tmp_path)
    assert main(["tournament", str(tmp_path / "t"), "--dataset", str(recipe), "--commission", "0.01"]) == 2
    rules = settings_of_tournament[-1].env.rules  # resolved once at the CLI, carried typed
    assert rules.buy_cost == rules.sell_cost == 0.01


def test_a_resumed_tournament_takes_its_pods_and_refuses_its_settings(
    tmp_path: Path, settings_of_tournament, capsys
) -> None:
    run = tmp_path / "t"
    run.mkdir()
    rundir.write_toml(
        run / "tournament.toml", {"run_dir": str(run), "env": "Pendulum-v1", "pod_steps": 5000, "pods": 4}
    )
    rundir.append_json_line(run / "events.jsonl", {"kind": "started", "time": 0.0})
    assert main(["tournament", str(run), "--resume", "--pods", "9", "--pod-steps", "5000", "--env", "Pendulum-v1"]) == 2
    assert capsys.readouterr().err.strip() == "error: stopped before the cluster"
    assert settings_of_tournament[-1].pods == 9 and settings_of_tournament[-1].pod_steps == 5000
    exits_2(
        ["tournament", str(run), "--resume", "--pods", "9", "--pod-steps", "8000"],
        capsys,
        "--resume: --pod-steps gives 8000 where the tournament",
    )


@pytest.mark.parametrize("form", ["market", "older"])
def test_a_resumed_market_tournament_keeps_its_market_and_names_the_part_a_flag_would_change(
    form: str, tmp_path: Path, settings_of_tournament, capsys
) -> None:
    """A market tournament's tournament.toml, written as one [env] table or in the older form (a loose
    env_config beside a name), resumes on its own `MarketSpec`; its data set repeated is taken, and a
    flag that would change its rules or its data set is refused naming that part."""
    from market_fixtures import write_tiny_recipe

    from trader.spec import MarketSpec, market_spec

    recipe = str(write_tiny_recipe(tmp_path))
    market = market_spec(recipe, {"buy_cost": 2e-4, "sell_cost": 2e-4})
    run = tmp_path / "t"
    run.mkdir()
    env = (
        {"env": market.to_dict()}
        if form == "market"
        else {"env": recipe, "env_config": {"buy_cost": 2e-4, "sell_cost": 2e-4}, "periods": {}, "windows": {}}
    )
    rundir.write_toml(run / "tournament.toml", {"run_dir": str(run), "pods": 4, **env})
    rundir.append_json_line(run / "events.jsonl", {"kind": "started", "time": 0.0})
    for more in ([], ["--dataset", recipe]):
        assert main(["tournament", str(run), "--resume", "--pods", "6", *more]) == 2
        assert capsys.readouterr().err.strip() == "error: stopped before the cluster"
        found = settings_of_tournament[-1]
        assert isinstance(found.env, MarketSpec) and found.env == market and found.pods == 6
    exits_2(["tournament", str(run), "--resume", "--commission", "0.01"], capsys, "--preset/--commission/--costs")
    exits_2(["tournament", str(run), "--resume", "--dataset", "synthetic-edge-daily"], capsys, "--dataset/--env")


def test_a_resume_keeps_the_saved_stops_and_cluster_unless_told_otherwise(
    tmp_path: Path, settings_of_tournament, capsys
) -> None:
    """`trader tournament RUN --resume` alone runs on the saved cluster (one worker stays one) to
    the saved stops (a time budget alone too); a stop or a cluster given replaces that group whole;
    every key of the one resume list acts, pods_per_gpu (a --config key) included."""
    run = tmp_path / "t"
    run.mkdir()
    saved = {"run_dir": str(run), "env": "Pendulum-v1", "workers": 1, "pods_per_gpu": 1, "time_budget": 60.0}
    rundir.write_toml(run / "tournament.toml", saved)  # pods = None: TOML holds no null, the key is absent
    rundir.append_json_line(run / "events.jsonl", {"kind": "started", "time": 0.0})

    def resumed(*more: str):
        assert main(["tournament", str(run), "--resume", *more]) == 2
        assert capsys.readouterr().err.strip() == "error: stopped before the cluster"
        found = settings_of_tournament[-1]
        return found.workers, found.pods, found.time_budget, found.pods_per_gpu

    assert resumed() == (1, None, 60.0, 1)
    assert resumed("--workers", "3", "--pods", "5") == (3, 5, None, 1)
    config = tmp_path / "more.toml"
    config.write_text("pods_per_gpu = 2\n")
    assert resumed("--config", str(config)) == (2, None, 60.0, 2)  # a cluster key given: the cluster's defaults


@pytest.fixture
def walk_forward_arguments(monkeypatch):
    """`trader walkforward` up to `walk_forward`: the keyword arguments it was called with, then a stop."""
    import podracer.walkforward as walkforward

    seen = {}

    def walk_forward(run_dir, dataset, folds, learner, **kwargs):
        seen.update(kwargs)
        raise UserError("stopped before the folds")

    monkeypatch.setattr(walkforward, "walk_forward", walk_forward)
    return seen


def test_walkforward_commission_without_a_preset_acts(tmp_path: Path, walk_forward_arguments) -> None:
    argv = [a.replace("RUN", str(tmp_path / "w")) for a in WALK]
    assert main([*argv, "--learner", "ppo", "--commission", "0.002"]) == 2
    rules = walk_forward_arguments["env_config"]  # an EnvConfig: the rate set on it, the rest the defaults
    assert (rules.buy_cost, rules.sell_cost) == (0.002, 0.002)
    assert replace(rules, buy_cost=0.0, sell_cost=0.0) == replace(EnvConfig(), buy_cost=0.0, sell_cost=0.0)


def test_walkforward_passes_its_learners_options_down(tmp_path: Path, walk_forward_arguments, capsys) -> None:
    """The options of `trader train` and `trader tournament` reach each fold's learner: the cost
    model and the aim rules into the env rules, --compile into the single learner or each fold's
    tournament, the cluster and the stops into the tournament's keys."""
    from market_envs.costs import cost_model

    argv = [a.replace("RUN", str(tmp_path / "w")) for a in WALK]
    assert (
        main(
            [
                *argv,
                "--learner",
                "ppo",
                "--costs",
                "retail",
                "--cost-set",
                "participation=0.05",
                "--compile",
                "--preset",
                "market",
                "--trade-rate",
                "0.3",
                "--seed",
                "4",
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    rules, named = walk_forward_arguments["env_config"], cost_model("retail").with_overrides({"participation": 0.05})
    assert rules.costs == named.costs and rules.buy_cost == named.buy_cost  # the model as an object, no dict step
    assert rules.trade_rate == 0.3 and rules.action_mode == "weights"
    assert walk_forward_arguments["compile"] is True and walk_forward_arguments["seed"] == 4
    assert walk_forward_arguments["tournament"] == {}
    ca = tmp_path / "ca.pem"
    assert (
        main(
            [
                *argv,
                "--compile",
                "--scheduler",
                "tls://127.0.0.1:8786",
                "--tls-ca",
                str(ca),
                "--target-score",
                "1.5",
                "--search",
                "random",
                "--ensemble-weighting",
                "score",
                "--num-envs",
                "16",
            ]
        )
        == 2
    )
    assert walk_forward_arguments["compile"] is False  # the single learner's; the tournament's is its key
    assert walk_forward_arguments["tournament"] == {
        "compile": True,
        "scheduler": "tls://127.0.0.1:8786",
        "tls_ca": str(ca.resolve()),
        "target_score": 1.5,
        "pods": None,
        "search": "random",
        "ensemble_weighting": "score",
        "num_envs": 16,
        "pod_steps": 16_384,  # the CLI's default per fold (podracer.cli.walkforward.WALK_POD_STEPS)
    }
    assert "stopped before the folds" in capsys.readouterr().err


# ------------------------------------------------------------------ errors name the user's words, before any output

WORDS = [
    ([*TRAIN, "--dataset", "synthetic-edge-daily", "--steps", "-5"], "--steps must be >= 1, got -5"),
    ([*TRAIN, "--env", "Pendulum-v1", "--num-envs", "0"], "--num-envs must be >= 1, got 0"),
    ([*TRAIN, "--env", "Pendulum-v1", "--eval-every", "-1"], "--eval-every must be >= 0, got -1"),
    ([*TRAIN, "--dataset", "synthetic-edge-daily", "--commission", "-0.1"], "--commission must be in [0, 1)"),
    ([*TRAIN, "--dataset", "no-such-recipe"], "no recipe 'no-such-recipe'"),
    (["backtest", "RUN", "--commission", "-0.1"], "--commission must be in [0, 1)"),
    (["backtest", "RUN", "--initial-cash", "0"], "--initial-cash must be > 0"),
    (["backtest", "RUN"], "no such run directory"),
    (
        ["tournament", "RUN", "--dataset", "synthetic-edge-daily", "--commission", "-0.1"],
        "--commission must be in [0, 1)",
    ),
    ([*WALK, "--learner", "ppo", "--commission", "1.5"], "--commission must be in [0, 1)"),
    (["demo", "RUN", "--commission", "1"], "--commission must be in [0, 1)"),
    ([*TRAIN, "--dataset", "synthetic-edge-daily", "--initial-cash", "-1"], "--initial-cash must be > 0, got -1.0"),
    ([*TRAIN, "--env", "Pendulum-v1", "--initial-cash", "1e7"], "--initial-cash applies to market data sets"),
    (["tournament", "RUN", "--dataset", "synthetic-edge-daily", "--initial-cash", "0"], "--initial-cash must be > 0"),
    (["tournament", "RUN", "--env", "Pendulum-v1", "--initial-cash", "1e7"], "--initial-cash applies to market"),
    ([*WALK, "--learner", "ppo", "--initial-cash", "nan"], "--initial-cash must be > 0, got nan"),
]


@pytest.mark.parametrize(("argv", "message"), WORDS, ids=[" ".join(a[:1] + a[-2:]) for a, _ in WORDS])
def test_an_error_names_the_flag_and_comes_alone(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    """One line naming the flag as typed (not ``EnvConfig.buy_cost``), and nothing before it:
    no configuration dump, no progress bar."""
    argv = [str(tmp_path / "run") if a == "RUN" else a for a in argv]
    exits_2(argv, capsys, message)
    assert not (tmp_path / "run").exists()


def test_one_list_parser_names_the_option_and_its_choices() -> None:
    from trader.errors import UserError
    from trader.names import gpu_numbers, name_list

    assert (
        name_list(None, "--x") == ()
        and name_list(" a, ,B ,", "--x") == ("a", "B")
        and name_list("A,b", "--x", lower=True) == ("a", "b")
    )
    with pytest.raises(UserError, match=r"^--algos: unknown algorithm\(s\) \['dqn'\]; choose from ppo, sac$"):
        name_list("ppo,dqn", "--algos", choices=("ppo", "sac"), what="algorithm")
    with pytest.raises(UserError, match="^--baselines needs at least one name$"):
        name_list(" , ", "--baselines", required=True)
    assert gpu_numbers(" 0, 2") == (0, 2)
    with pytest.raises(UserError, match="^--gpus takes 'all' or GPU numbers like 0,1; got '0,x'$"):
        gpu_numbers("0,x")
    root = Path(__file__).parents[1]
    product = [
        path
        for folder in ("trader", "tournament", "market_envs", "dashboards")
        for path in (root / folder).rglob("*.py")
        if path != root / "trader" / "names.py"
    ]
    assert [p for p in product if 'split(",")' in p.read_text()] == []  # every list is parsed by name_list


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["train", "RUN", "--qqq"], "trader train: No such option: --qqq (see 'trader train --help')"),
        (["backtest"], "trader backtest: Missing argument 'run_dir' (see 'trader backtest --help')"),
        (["train", "RUN", "--steps", "many"], "trader train: Invalid value for '--steps'"),
        (["nosuch"], "trader: No such command 'nosuch' (see 'trader --help')"),
    ],
)
def test_a_usage_error_is_one_line_naming_what_is_wrong(argv: list[str], says: str, tmp_path: Path, capsys) -> None:
    """Bad input on the command line: exit code 2 and one line on stderr, not click's usage block."""
    argv = [str(tmp_path / "run") if a == "RUN" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {says}"), err
    assert not (tmp_path / "run").exists()


def test_errors_name_the_flag_on_the_cli_and_the_field_in_python(tmp_path: Path, capsys) -> None:
    """Issue 75, finding 11: the CLI said "population must be >= 1". A config error names the field
    it blames (`ConfigError.key`); the CLI names the flag of the command run that sets it."""
    from tournament import TournamentConfig
    from trader.errors import ConfigError

    run = str(tmp_path / "t")
    exits_2(
        ["tournament", run, "--env", "Pendulum-v1", "--population", "0"], capsys, "--population must be >= 1, got 0"
    )
    exits_2(["tournament", run, "--env", "Pendulum-v1", "--pod-steps", "0"], capsys, "--pod-steps must be >= 1, got 0")
    assert not (tmp_path / "t").exists()
    with pytest.raises(ConfigError, match=r"^population must be >= 1, got 0$"):
        TournamentConfig(population=0)


def test_an_interrupted_command_without_a_stop_of_its_own_says_one_line_and_exits_130(monkeypatch, capsys):
    """Ctrl+C in a command that has no stop of its own (trader data, backtest, ...): one line, exit 130, no
    traceback."""
    import podracer.cli as cli

    class Interrupting:
        def main(self, **_: object) -> int:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli.typer.main, "get_command", lambda app: Interrupting())
    assert cli.main(["data", "list"]) == 130
    err = capsys.readouterr().err
    assert err == "interrupted: the command stopped before its end\n"
