"""`trader data ...` run in-process through `podracer.cli.main`."""

from __future__ import annotations

import pytest

from market_envs.data.cache import DataCache
from test_data_frame import BAD_CASES, good_frame
from test_recipes import write_files_recipe
from podracer.cli import main


@pytest.mark.parametrize(
    "command", [["data"], ["data", "build"], ["data", "info"], ["data", "validate"], ["data", "list"]]
)
def test_help(command, capsys):
    assert main([*command, "--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def test_build_caches_and_info_reports_it(tmp_path, capsys):
    recipe = write_files_recipe(tmp_path)
    cache = tmp_path / "cache"
    assert main(["data", "info", str(recipe), "--data-dir", str(cache)]) == 0
    assert "no (run `trader data build`)" in capsys.readouterr().out
    assert main(["data", "build", str(recipe), "--data-dir", str(cache)]) == 0
    out = capsys.readouterr()
    assert "tiny-files" in out.out and "T000" not in out.err and "cached:" in out.err
    assert len(DataCache(cache).panels()) == 1
    assert main(["data", "info", str(recipe), "--data-dir", str(cache)]) == 0
    info = capsys.readouterr().out
    assert "no (run" not in info and "built_tickers" in info


def test_build_with_overrides(tmp_path, capsys):
    recipe = write_files_recipe(tmp_path)
    code = main(["data", "build", str(recipe), "--data-dir", str(tmp_path / "c"), "--set", 'tickers=["T001"]'])
    assert code == 0
    assert DataCache(tmp_path / "c").panels()[0]["tickers"] == ["T001"]
    assert main(["data", "build", str(recipe), "--data-dir", str(tmp_path / "c"), "--set", "nope=1"]) == 2
    assert "unknown override 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("case_id, mutate, words", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_data_exits_2_with_the_message_and_caches_nothing(tmp_path, capsys, case_id, mutate, words):
    recipe = write_files_recipe(tmp_path, mutate(good_frame()))
    cache = tmp_path / "cache"
    assert main(["data", "build", str(recipe), "--data-dir", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "Traceback" not in err
    assert "bars" in err and all(word in err for word in words)
    assert not cache.exists() or list(cache.rglob("*")) == []


def test_validate_good_and_bad_files(tmp_path, capsys):
    good = tmp_path / "good"
    good.mkdir()
    good_frame().to_csv(good / "bars.csv", index=False)
    assert main(["data", "validate", str(good)]) == 0
    assert "valid" in capsys.readouterr().out
    bad = tmp_path / "bad"
    bad.mkdir()
    BAD_CASES[0][1](good_frame()).to_csv(bad / "bars.csv", index=False)
    assert main(["data", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bars.csv" in err and "T001" in err and "NaN" in err and "Traceback" not in err


def test_validate_requires_named_tickers(tmp_path, capsys):
    good_frame().to_csv(tmp_path / "bars.csv", index=False)
    assert main(["data", "validate", str(tmp_path), "--tickers", "T000,AAPL"]) == 2
    assert "AAPL" in capsys.readouterr().err


def test_unknown_recipe_exits_2(capsys):
    assert main(["data", "build", "no-such-recipe"]) == 2
    assert "no recipe 'no-such-recipe'" in capsys.readouterr().err


def test_list_shows_shipped_recipes(capsys):
    assert main(["data", "list"]) == 0
    assert "nasdaq100-minute" in capsys.readouterr().out
