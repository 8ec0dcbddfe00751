"""The run directory's module: whole-or-nothing writes, reads that name the broken
file, the config codec, and the table of every file a stage writes."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from trader import rundir
from trader.durations import parse_duration
from trader.environments import EnvName, resolve_env
from trader.errors import ConfigError, UserError
from trader.rundir import RunFileError, config_from_dict, config_to_dict

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------ writes


def test_temporaries_are_recognised_and_never_run_files(tmp_path: Path) -> None:
    seen = []
    rundir.write_atomic(tmp_path / "trials.parquet", lambda tmp: seen.append(tmp) or tmp.write_bytes(b"x"))
    assert rundir.is_temporary(seen[0]) and rundir.is_temporary(rundir.stage_folder(tmp_path / "baselines" / "a"))
    assert not rundir.is_temporary("trials.parquet") and not rundir.is_temporary("tearsheet_best.png")


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "leaderboard.json"
    rundir.write_json(path, {"entries": [1]})

    def broken(tmp: Path) -> None:
        tmp.write_text('{"entries": [', encoding="utf-8")  # half a file, then the writer dies
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        rundir.write_atomic(path, broken)
    assert json.loads(path.read_text()) == {"entries": [1]}
    assert [p.name for p in tmp_path.iterdir()] == ["leaderboard.json"]


def test_json_is_strict_and_parent_folders_are_made(tmp_path: Path) -> None:
    path = rundir.write_json(tmp_path / "a" / "b.json", {"score": math.nan, "k": (1, math.inf), "ok": 0.5})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}")) == {
        "score": None,
        "k": [1, None],
        "ok": 0.5,
    }


def test_toml_drops_none_and_round_trips(tmp_path: Path) -> None:
    path = rundir.write_toml(tmp_path / "config.toml", {"algo": "ppo", "init_from": None, "env": {"steps": [1, 2]}})
    assert rundir.read_toml(path) == {"algo": "ppo", "env": {"steps": [1, 2]}}


def test_parquet_from_a_frame_or_a_table(tmp_path: Path) -> None:
    frame = pd.DataFrame({"step": [1.0, 2.0], "score": [0.5, math.nan]})
    rundir.write_parquet(tmp_path / "m.parquet", frame)
    pd.testing.assert_frame_equal(rundir.read_parquet(tmp_path / "m.parquet"), frame)
    rundir.write_parquet(tmp_path / "t.parquet", pa.Table.from_pandas(frame, preserve_index=False))
    assert rundir.read_parquet(tmp_path / "t.parquet", columns=("step",))["step"].tolist() == [1.0, 2.0]


def test_a_staged_folder_replaces_the_old_one_only_when_committed(tmp_path: Path) -> None:
    final = tmp_path / "baselines" / "sb3-ppo-s0"
    final.mkdir(parents=True)
    (final / "old.txt").write_text("old")
    staged = rundir.stage_folder(final)
    (staged / "new.txt").write_text("new")
    assert [p.name for p in final.iterdir()] == ["old.txt"]  # nothing moves before the commit
    rundir.commit_folder(staged, final)
    assert [p.name for p in final.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in final.parent.iterdir()) == ["sb3-ppo-s0"]


# ------------------------------------------------------------------------ reads


def test_reads_name_the_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(RunFileError, match=r"report.json: not found"):
        rundir.read_json(tmp_path / "report.json")
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(RunFileError, match=r"bad.json: not valid JSON"):
        rundir.read_json(tmp_path / "bad.json")
    (tmp_path / "bad.toml").write_text("algo = ")
    with pytest.raises(RunFileError, match=r"bad.toml: not valid TOML"):
        rundir.read_toml(tmp_path / "bad.toml")
    assert rundir.read_toml(tmp_path / "none.toml", missing_ok=True) == {}
    (tmp_path / "cut.parquet").write_bytes(b"PAR1 half a file")
    with pytest.raises(RunFileError, match=r"cut.parquet: not a readable Parquet file"):
        rundir.read_parquet(tmp_path / "cut.parquet")
    rundir.write_json(tmp_path / "old.json", {"format_version": 0})
    with pytest.raises(RunFileError, match=r"old.json: format_version 0, this library reads 1"):
        rundir.read_json(tmp_path / "old.json", version=1)
    assert issubclass(RunFileError, UserError)  # the CLI prints one line and exits 2


def test_the_module_and_the_dashboards_reader_load_without_torch() -> None:
    script = "import sys, trader.rundir, dashboards.runs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-1000:]
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------ the codec


@dataclass(frozen=True)
class _Inner:
    rate: float = 0.0
    per_ticker: tuple[float, ...] | None = None


@dataclass(frozen=True)
class _ToyConfig:
    hidden: tuple[int, ...] = (8, 8)
    lr: float = 1e-3
    target: float | None = None
    inner: _Inner = field(default_factory=_Inner)


def test_config_round_trip_and_unknown_key() -> None:
    cfg = _ToyConfig(hidden=(4,), lr=2.0, target=1.0)
    assert config_to_dict(cfg) == {"hidden": [4], "lr": 2.0, "target": 1.0, "inner": {"rate": 0.0, "per_ticker": None}}
    assert config_from_dict(_ToyConfig, {"hidden": [4], "lr": 2, "target": 1}) == cfg
    with pytest.raises(ConfigError, match="unknown _ToyConfig key.*lrr"):
        config_from_dict(_ToyConfig, {"lrr": 1.0})


def test_nested_configs_round_trip_through_toml(tmp_path: Path) -> None:
    cfg = _ToyConfig(inner=_Inner(rate=3, per_ticker=(1.0, 2.0)))
    rundir.write_toml(tmp_path / "c.toml", config_to_dict(cfg))
    back = config_from_dict(_ToyConfig, rundir.read_toml(tmp_path / "c.toml"))
    assert back == cfg and isinstance(back.inner.rate, float) and isinstance(back.inner.per_ticker, tuple)
    assert config_from_dict(_ToyConfig, {"inner": {"rate": 1}}).inner == _Inner(rate=1.0)  # missing keys: defaults
    with pytest.raises(ConfigError, match="unknown _Inner key.*speed"):
        config_from_dict(_ToyConfig, {"inner": {"speed": 1}})
    assert rundir.replace_config(cfg, lr=0.5).lr == 0.5
    with pytest.raises(ConfigError):
        rundir.replace_config(cfg, learning_rate=0.5)


# ------------------------------------------------------------------------ the table of files


def documented_table() -> str:
    """The table of run files in docs/contracts.md."""
    text = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = text.split("## A run directory at a glance", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"^\|.*\|$", section, flags=re.M))


def test_the_contracts_table_is_the_modules_table() -> None:
    assert documented_table() == rundir.files_table(), "paste trader.rundir.files_table() into docs/contracts.md"


def test_file_kind_matches_pods_and_refuses_strangers() -> None:
    assert rundir.file_kind("checkpoints/best.json").writer == "trader.agents.checkpoint"
    assert rundir.file_kind("pods/p0003/metrics.parquet").writer == "trader.train"
    assert rundir.file_kind("pods/p0003/error.txt").writer == "tournament.pod"
    assert rundir.file_kind("backtests/best.parquet").writer == "trader.backtesting.report"
    assert rundir.file_kind("notes.txt") is None
    assert rundir.file_kind("backtests/deeper/best.parquet") is None


def assert_every_file_is_documented(root: Path) -> None:
    """Every file a run wrote into ``root`` belongs to a `rundir.FILES` entry (a
    temporary that a killed writer left behind is not a run file)."""
    strangers = [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file()
        and not any(rundir.is_temporary(part) for part in p.relative_to(root).parts)
        and rundir.file_kind(p.relative_to(root)) is None
    ]
    assert not strangers, f"files not in trader.rundir.FILES (and docs/contracts.md): {strangers}"


# ------------------------------------------------------------------------ one home each


def test_one_duration_grammar() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "10m", "1.5h", "2d")] == [90.0, 90.0, 600.0, 5400.0, 172800.0]
    for bad in ("", "soon", "10 minutes", "-5m", "0"):
        with pytest.raises(UserError, match="--time-budget must be"):
            parse_duration(bad, "--time-budget")


def test_the_env_name_is_resolved_once(tmp_path: Path, monkeypatch) -> None:
    recipe = tmp_path / "mine.toml"
    recipe.write_text("name = 'mine'\n")
    monkeypatch.chdir(tmp_path)
    assert resolve_env("Pendulum-v1") == EnvName("gymnasium", "Pendulum-v1")
    assert resolve_env("mine.toml") == EnvName("recipe_file", str(recipe.resolve()))
    assert resolve_env("synthetic-edge-daily") == EnvName("recipe", "synthetic-edge-daily")
    assert resolve_env("missing.toml") == EnvName("recipe", "missing.toml")  # load() names what is wrong
    assert resolve_env(resolve_env("Pendulum-v1")).is_gym


def test_a_log_line_torn_by_a_crash_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    assert rundir.read_json_lines(log) == []
    assert rundir.append_json_line(log, {"kind": "finished", "score": math.nan}) == {"kind": "finished", "score": None}
    rundir.append_json_line(log, {"kind": "entered"})
    with log.open("a") as handle:
        handle.write('{"kind": "fin')  # the process died mid-line
    assert [e["kind"] for e in rundir.read_json_lines(log)] == ["finished", "entered"]


def test_a_runs_kind_is_decided_once_for_the_backtest_and_the_dashboard(tmp_path: Path) -> None:
    """`rundir.run_kind` decides what a folder records, by the file its writer puts first;
    the dashboard's `RunDir` and the backtest's `read_run` take its decision."""
    from dashboards.runs import RunDir

    def folder(name: str, *files: str) -> Path:
        for file in files:
            (tmp_path / name / file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / file).write_text("")
        return tmp_path / name

    made = {
        "train": folder("a", rundir.CONFIG),
        "tournament": folder("b", rundir.TOURNAMENT, rundir.LEADERBOARD, rundir.CONFIG),
        "walkforward": folder("c", rundir.WF_CONFIG),
        "experiment": folder("d", rundir.EXPERIMENT),
        "baselines": folder("e", f"{rundir.BASELINES_DIR}/sb3-ppo-s0/{rundir.BASELINE_SIDECAR}"),
        None: folder("f", rundir.REPORT_JSON),
    }
    made["train (checkpoints only)"] = folder("g", f"{rundir.CHECKPOINTS}/final.json")
    for kind, path in made.items():
        expected = kind.split(" ")[0] if kind else None
        assert rundir.run_kind(path) == expected, path
        assert RunDir(path.name, path).kind == expected
        assert RunDir(path.name, path).has_tournament == (expected == "tournament")
    assert rundir.run_kind(tmp_path / "missing") is None
    assert rundir.checkpoints(made["train (checkpoints only)"]) == {
        "final": made["train (checkpoints only)"] / "checkpoints" / "final"
    }
    assert rundir.baseline_folders(made["baselines"]) == [made["baselines"] / "baselines" / "sb3-ppo-s0"]


def test_a_folder_of_several_runs_is_refused_where_one_run_is_read(tmp_path: Path) -> None:
    """A walk-forward or an experiment names a run inside it (and its report); a run passes."""
    from trader.backtesting.runs import read_run

    experiment = tmp_path / "exp"
    rundir.write_toml(experiment / rundir.EXPERIMENT, {"seed": 0})
    rundir.write_toml(experiment / "tournament" / rundir.TOURNAMENT, {"env": "Pendulum-v1"})
    with pytest.raises(UserError, match=f"an experiment .*{experiment / 'tournament'}.*{rundir.EXPERIMENT_TABLE}"):
        read_run(experiment)
    walk = tmp_path / "wf"
    rundir.write_toml(walk / rundir.WF_CONFIG, {"learner": "ppo"})
    for k in (0, 1):
        rundir.write_toml(rundir.fold_dir(walk, k) / rundir.CONFIG, {"algo": "ppo"})
    with pytest.raises(UserError, match=f"a walk-forward .*{rundir.fold_dir(walk, 1)}.*{rundir.WF_REPORT_MD}"):
        rundir.check_one_run(walk)
    rundir.check_one_run(rundir.fold_dir(walk, 1))  # a fold is a run of its own
    assert sorted(p.name for p in walk.iterdir()) == ["folds", rundir.WF_CONFIG]  # nothing written


def test_a_folds_record_and_a_best_snapshots_step_are_read_in_one_place(tmp_path: Path) -> None:
    for k in (2, 0, 10):
        rundir.fold_dir(tmp_path, k).mkdir(parents=True)
    (tmp_path / rundir.WF_FOLDS_DIR / "notes").mkdir()
    rundir.write_json(
        rundir.fold_dir(tmp_path, 2) / rundir.WF_FOLD, {"format_version": rundir.WF_FOLD_VERSION, "fold": 2}
    )
    assert [p.name for p in rundir.fold_folders(tmp_path)] == ["0", "2", "10"]
    assert rundir.read_fold(tmp_path, 0) is None and rundir.read_fold(tmp_path, 2)["fold"] == 2
    rundir.write_json(rundir.fold_dir(tmp_path, 10) / rundir.WF_FOLD, {"format_version": 99})
    with pytest.raises(RunFileError, match="format_version 99"):
        rundir.read_fold(tmp_path, 10)
    assert rundir.best_step(tmp_path) is None
    rundir.write_json(tmp_path / rundir.CHECKPOINTS / "best.json", {"info": {"step": 640}})
    assert rundir.best_step(tmp_path) == 640
