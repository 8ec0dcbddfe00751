"""Training that survives interruption (`trader.train`'s ``resume``, ``trader train --resume``)
and a training run on a place that cannot be written (a full disk, a read-only folder)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from trader import rundir
from trader.agents.checkpoint import read_metadata
from trader.agents.ppo import PPORunner
from podracer.cli import main
from trader.errors import UserError
from trader.stopping import Interrupted, StopRequest, stop_on_signals
from trader.training import resume, train

from market_fixtures import write_tiny_recipe

TINY = {"num_steps": 16, "update_epochs": 2, "num_minibatches": 2, "hidden_sizes": [16]}
RULES = {"random_start": False, "episode_length": 16}
"""Episodes of 16 bars from the first bar, 16 steps an iteration: every iteration starts where a
fresh reset puts the env, so a resumed PPO run can equal the uninterrupted one bit for bit."""
ROOT = Path(__file__).resolve().parents[1]


def _train(recipe: Path, run: Path, **extra) -> object:
    common = {"steps": 256, "num_envs": 4, "seed": 3, "env_config": RULES, "eval_every": 128}
    return train("ppo", str(recipe), TINY, run, **{**common, **extra})


def _stop_at(step: int) -> tuple[StopRequest, object]:
    stop = StopRequest()

    def hook(row: dict[str, float]) -> None:
        if row["step"] == step:
            stop.request(signal.SIGTERM)

    return stop, hook


def _assert_same_tensors(first: Path, second: Path) -> None:
    a, b = load_file(first), load_file(second)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_an_interrupted_run_keeps_its_records_and_resumes_to_the_uninterrupted_weights(tmp_path: Path) -> None:
    """PPO on one CPU worker: stopped at step 192 (between evaluations), resumed to 256: the
    final weights, the best snapshot, the metrics and the trials are the uninterrupted run's."""
    recipe = write_tiny_recipe(tmp_path)
    _train(recipe, tmp_path / "whole")
    stop, hook = _stop_at(192)
    part = tmp_path / "part"
    with pytest.raises(Interrupted) as caught:
        _train(recipe, part, stop=stop, on_iteration=hook)
    assert (caught.value.step, caught.value.signal, caught.value.exit_code) == (192, signal.SIGTERM, 143)
    assert read_metadata(part / "checkpoints" / "best")["info"]["step"] == 128  # saved when validation found it
    assert read_metadata(part / rundir.RESUME_POINT)["info"] == {
        "step": 192,
        "last_eval": 128,
        "wall_time": pytest.approx(pd.read_parquet(part / "metrics.parquet")["wall_time"].iloc[-1]),
        "runner": False,  # PPO's runner keeps nothing between iterations
    }
    assert pd.read_parquet(part / "metrics.parquet")["step"].tolist() == [64.0, 128.0, 192.0]
    assert not (part / "checkpoints" / "final.json").exists()

    result = resume(part)  # config.toml's arguments: the same config
    assert result.steps == 256
    for name in ("checkpoints/final", "checkpoints/best"):
        _assert_same_tensors(tmp_path / "whole" / f"{name}.safetensors", part / f"{name}.safetensors")
    assert not (part / rundir.RESUME_DIR).exists()  # finished: nothing left to resume
    frames = [
        pd.read_parquet(tmp_path / r / "metrics.parquet").drop(columns=["wall_time", "samples_per_s"])
        for r in ("whole", "part")
    ]
    pd.testing.assert_frame_equal(frames[0], frames[1])
    trials = [pd.read_parquet(tmp_path / r / "trials.parquet") for r in ("whole", "part")]
    pd.testing.assert_frame_equal(trials[0], trials[1])
    assert pd.read_parquet(part / "metrics.parquet")["wall_time"].is_monotonic_increasing


def test_resume_refuses_another_config_and_a_run_without_a_point(tmp_path: Path) -> None:
    recipe = write_tiny_recipe(tmp_path)
    stop, hook = _stop_at(64)
    with pytest.raises(Interrupted):
        _train(recipe, tmp_path / "run", stop=stop, on_iteration=hook, eval_every=0)
    with pytest.raises(UserError, match=r"another config: steps \(recorded 256, now 512\)"):
        _train(recipe, tmp_path / "run", resume=True, steps=512, eval_every=0)
    _train(recipe, tmp_path / "run", resume=True, eval_every=0)
    with pytest.raises(UserError, match="no point to resume from .*it finished"):
        _train(recipe, tmp_path / "run", resume=True, eval_every=0)
    with pytest.raises(UserError, match="holds no training run"):
        _train(recipe, tmp_path / "empty", resume=True)


@pytest.mark.parametrize("algo", ["sac"])
def test_an_off_policy_run_stopped_by_a_signal_resumes_with_its_replay_buffer(algo: str, tmp_path: Path) -> None:
    """SAC (TD3 shares its runner): a signal's stop saves the replay buffer beside the point, and
    the resumed run learns on from it (the buffer's size carries on; no new wait for
    learning_starts); a point without it (an evaluation's, after a kill) starts empty."""
    recipe = write_tiny_recipe(tmp_path)
    config = {"hidden_sizes": [8], "learning_starts": 32, "batch_size": 16, "iteration_steps": 32, "buffer_size": 256}
    common = {"steps": 192, "num_envs": 4, "eval_every": 64, "env_config": RULES}
    run = tmp_path / "run"
    stop, hook = _stop_at(96)
    with pytest.raises(Interrupted):
        train(algo, str(recipe), config, run, stop=stop, on_iteration=hook, **common)
    assert read_metadata(run / rundir.RESUME_POINT)["info"]["runner"] is True
    saved = load_file(run / f"{rundir.RESUME_POINT}.safetensors")
    assert load_file(run / rundir.RESUME_RUNNER)["buffer.obs"].shape[:2] == (24, 4)  # 96 transitions, 4 a slot
    result = train(algo, str(recipe), config, run, resume=True, **common)
    assert result.steps == 192 and result.agent.num_updates > int(saved["extra.num_updates"])
    metrics = pd.read_parquet(run / "metrics.parquet")
    assert metrics["step"].tolist() == [32.0 * k for k in range(1, 7)]
    assert metrics["buffer_size"].tolist() == [32.0 * k for k in range(1, 7)]  # the buffer came back
    assert not (run / rundir.RESUME_DIR).exists()


def test_a_signal_outside_the_training_loop_ends_at_once() -> None:
    previous = signal.getsignal(signal.SIGINT)  # Python's default, unless a test before left another
    with stop_on_signals() as stop, pytest.raises(Interrupted) as caught:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler raises in this thread before the sleep ends
    assert caught.value.step is None and caught.value.exit_code == 130 and not stop.listening
    assert signal.getsignal(signal.SIGINT) is previous  # the previous handler is back


def _signal_at_iteration(monkeypatch: pytest.MonkeyPatch, count: int, signum: int) -> None:
    """Send the process ``signum`` (a real signal) as PPO's ``count``-th iteration ends."""
    original = PPORunner.iteration
    calls = []

    def iteration(self):
        metrics = original(self)
        calls.append(1)
        if len(calls) == count:
            os.kill(os.getpid(), signum)
        return metrics

    monkeypatch.setattr(PPORunner, "iteration", iteration)


def _cli_args(recipe: Path, run: Path) -> list[str]:
    config = run.parent / "ppo.toml"
    config.write_text("num_steps = 16\nupdate_epochs = 1\nnum_minibatches = 2\nhidden_sizes = [8]\n")
    return ["train", str(run), "--algo", "ppo", "--dataset", str(recipe), "--steps", "256", "--num-envs", "4"] + [
        "--eval-every",
        "64",
        "--config",
        str(config),
    ]


def test_cli_sigint_says_where_it_stopped_and_resume_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = write_tiny_recipe(tmp_path)
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        _signal_at_iteration(patch, 3, signal.SIGINT)
        assert main(_cli_args(recipe, run)) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    best = rundir.best_step(run)
    assert err == (
        f"interrupted (SIGINT) at step 192 of 256; the run keeps its records and its best snapshot "
        f"(step {best}): continue with: trader train {run} --resume"
    )
    assert (run / "checkpoints" / "best.safetensors").is_file()
    assert main(["train", str(run), "--resume", "--steps", "512"]) == 2
    assert "--steps 512 contradicts the run's config.toml (256)" in capsys.readouterr().err
    assert main(["train", str(run), "--resume", "--trade-rate", "0.5"]) == 2
    assert "--trade-rate cannot change a resumed run" in capsys.readouterr().err
    assert main(["train", str(run), "--resume", "--steps", "256", "--algo", "ppo"]) == 0, capsys.readouterr().err
    assert "done: 256 steps" in capsys.readouterr().err
    assert read_metadata(run / "checkpoints" / "final")["info"]["step"] == 256


def test_cli_a_full_disk_is_one_line_and_keeps_what_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills as training ends (the final checkpoint): exit 2, one line naming the file;
    the best snapshot, the records and the resume point are intact, and --resume finishes."""
    recipe = write_tiny_recipe(tmp_path)
    run = tmp_path / "run"
    original = rundir.write_atomic

    def full_for_final(path, write):
        def fail(tmp):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return original(path, fail if Path(path).name.startswith("final.") else write)

    with monkeypatch.context() as patch:
        patch.setattr(rundir, "write_atomic", full_for_final)
        assert main(_cli_args(recipe, run)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: cannot write {run / 'checkpoints' / 'final.safetensors'}: No space left on device; "
        f"the run keeps what it saved up to step 256: make room, then: trader train {run} --resume"
    )
    assert not any(p.name.startswith(".") for p in (run / "checkpoints").iterdir())  # no temporary left
    assert read_metadata(run / "checkpoints" / "best")["info"]["step"] in (64, 128, 192, 256)
    assert len(pd.read_parquet(run / "metrics.parquet")) == 4
    assert main(["train", str(run), "--resume"]) == 0, capsys.readouterr().err
    assert (run / "checkpoints" / "final.safetensors").is_file()


def test_an_unwritable_run_folder_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """EROFS (a read-only mount) where the run's first folder is made: exit 2 naming it."""
    recipe = write_tiny_recipe(tmp_path)
    run = tmp_path / "run"
    original = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self == run / "checkpoints":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(_cli_args(recipe, run)) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: cannot write {run / 'checkpoints'}: Read-only file system"
    )


@pytest.mark.slow
def test_a_real_sigterm_to_trader_train_keeps_the_best_snapshot(tmp_path: Path) -> None:
    """`trader train` in its own process, SIGTERM once its first evaluation is saved: exit 143,
    one line naming the step and `--resume`, the best snapshot on disk."""
    recipe = write_tiny_recipe(tmp_path)
    run = tmp_path / "run"
    args = _cli_args(recipe, run)
    args[args.index("--steps") + 1] = str(10**9)
    process = subprocess.Popen(
        [sys.executable, "-c", "from podracer.cli import entry_point; entry_point()", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (run / f"{rundir.RESUME_POINT}.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted (SIGTERM) at step ") and last.endswith(f"trader train {run} --resume")
    assert (run / "checkpoints" / "best.safetensors").is_file()
