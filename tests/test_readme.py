"""The README is a front door and the docs site builds (issue 76; issue 75's README findings).

- The README stays short: the two commands, the tour, today's results, the layout, where to
  read on; everything else lives in the docs pages.
- Its layout block is the tree: every path it names exists, and every top-level folder and
  package is named.
- Every Python snippet of the README and the docs that starts dask holds its work under
  ``if __name__ == "__main__":`` (finding 5: saved as a script, the unguarded tournament
  snippet died in a multiprocessing traceback, since the cluster's workers import it again).
- ``mkdocs build --strict`` builds the site without a warning (a broken link or anchor, a page
  missing from the nav, a docstring mkdocstrings cannot read) and without the network.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

MAX_README_LINES = 300
"""The front door's bound (issue 76: under 300 lines, about 250)."""

UNTRACKED_FOLDERS = {".venv", ".venv-rllib", "runs", "site", "build", "dist", "__pycache__"}
"""Top-level folders a checkout may hold that are not part of the tree (built or written)."""


def pages() -> list[Path]:
    """The README and the docs site's own pages (the lab notebook, docs/notebook/, aside)."""
    return [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "api").glob("*.md"))]


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section of a Markdown page."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"no section '## {title}'"
    return match.group(1)


def layout_entries(text: str) -> dict[str, str]:
    """The layout block's entries: each path in its first column and its description (its
    continuation lines, indented, joined)."""
    block = re.search(r"```\w*\n(.*?)```", section(text, "Layout"), re.DOTALL)
    assert block, "the Layout section has no code block"
    entries: dict[str, str] = {}
    path = None
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        if line[0].isspace():
            assert path is not None, f"a continuation line before any entry: {line!r}"
            entries[path] += " " + line.strip()
        else:
            path, _, description = line.partition(" ")
            entries[path] = description.strip()
    return entries


NAMED_FILE = re.compile(r"(?<![\w./`-])([A-Za-z_][\w-]*(?:/|\.(?:py|c|md|toml|sh)))(?![\w/])")
"""A file (``env.py``) or folder (``agents/``) that a layout description names."""


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_README_LINES, f"README.md has {len(lines)} lines; the docs pages hold the rest"
    titles = re.findall(r"^## (.+)$", "\n".join(lines), re.MULTILINE)
    for title in ("Start here: two commands", "A five-minute tour", "Today's results", "Layout", "Where to read on"):
        assert title in titles, f"README.md lacks its section '{title}'"


def test_every_path_the_layout_names_exists() -> None:
    entries = layout_entries(README.read_text(encoding="utf-8"))
    assert len(entries) >= 8, entries
    for path, description in entries.items():
        assert (ROOT / path).exists(), f"the README's layout names {path}, which does not exist"
        for name in NAMED_FILE.findall(description):
            name = name.rstrip("/")
            here = ROOT / path if (ROOT / path).is_dir() else ROOT
            assert (here / name).exists() or (ROOT / name).exists(), (
                f"the README's layout names {name} under {path}, which does not exist"
            )


def top_level_folders() -> set[str]:
    """The tree's top-level folders (git's tracked files, else the checkout's folders) and the
    packages one floor down (``podracer``: a floor of its own inside ``trader``)."""
    try:
        tracked = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        tracked = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()]
    folders = {name.split("/")[0] for name in tracked if "/" in name}
    folders = {f for f in folders if not f.startswith(".") and f not in UNTRACKED_FOLDERS}
    floors = {"podracer"} if (ROOT / "trader" / "app" / "__init__.py").is_file() else set()
    return folders | floors


def test_the_layout_names_every_top_level_folder_and_package() -> None:
    named = {path.rstrip("/") for path in layout_entries(README.read_text(encoding="utf-8"))}
    missing = sorted(top_level_folders() - named)
    assert not missing, f"the README's layout does not name {missing}"


def test_the_layout_check_catches_a_stale_entry() -> None:
    text = "## Layout\n\n```text\nmarket_envs/   the env (env.py, gone.py)\nnowhere/   gone\n```\n"
    entries = layout_entries(text)
    assert set(entries) == {"market_envs/", "nowhere/"}
    assert NAMED_FILE.findall(entries["market_envs/"]) == ["env.py", "gone.py"]
    assert not (ROOT / "market_envs" / "gone.py").exists() and not (ROOT / "nowhere").exists()


STARTS_DASK = re.compile(r"\btournament\.run\(|\bwalk_forward\(|\bexperiment\.podracer\(|LocalCluster\(|KubeCluster\(")
"""A call that starts a dask cluster (or a client of one) in the calling script."""

GUARD = re.compile(r'^if __name__ == "__main__":$', re.MULTILINE)


def python_snippets(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


def unguarded(snippet: str) -> bool:
    """A snippet that starts dask without holding that work under the ``__main__`` guard."""
    if not STARTS_DASK.search(snippet):
        return False
    guard = GUARD.search(snippet)
    if guard is None:
        return True
    # every call that starts dask comes after the guard, indented under it
    before = snippet[: guard.start()]
    return bool(STARTS_DASK.search(before))


def test_every_python_snippet_that_starts_dask_is_guarded() -> None:
    checked = 0
    for page in pages():
        for snippet in python_snippets(page):
            ast.parse(snippet)  # every snippet is Python, whole
            if STARTS_DASK.search(snippet):
                checked += 1
                assert not unguarded(snippet), (
                    f'{page.relative_to(ROOT)}: a snippet that starts dask lacks `if __name__ == "__main__":` '
                    f"(the cluster's workers import the script again):\n{snippet}"
                )
    assert checked >= 2, checked  # the tournament page's and the Kubernetes one, at least


def test_the_guard_check_catches_the_old_tournament_snippet() -> None:
    old = (
        "import tournament\n\nconfig = tournament.TournamentConfig(run_dir='runs/t1', workers=2)\n"
        "result = tournament.run(config)\n"
    )
    guarded = 'import tournament\n\nif __name__ == "__main__":\n    result = tournament.run(config)\n'
    late = 'import tournament\n\nresult = tournament.run(config)\nif __name__ == "__main__":\n    pass\n'
    assert unguarded(old) and unguarded(late) and not unguarded(guarded)
    assert not unguarded("import trader\ntrader.train('ppo', data, config, 'runs/ppo')\n")


def offline_prefix() -> list[str]:
    """``unshare -n`` (a network namespace of loopback only) where this machine allows it."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    try:
        ok = subprocess.run([unshare, "-n", "true"], check=False, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return [unshare, "-n"] if ok else []


def test_the_docs_site_needs_no_network_to_build() -> None:
    """Where ``unshare -n`` is not allowed the build below runs with the network: then this is
    the check that nothing in the site's configuration reaches for it (Material's social cards
    and privacy plugin download at build time; Google Fonts load in the reader's browser)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    plugins = re.search(r"^plugins:\n((?:[ ]+.*\n)+)", text, re.MULTILINE)
    assert plugins, "mkdocs.yml has no plugins list"
    names = set(re.findall(r"^  - ([\w-]+)", plugins.group(1), re.MULTILINE))
    assert names <= {"search", "mkdocstrings"}, f"plugins that may reach the network: {names}"
    assert re.search(r"^  font: false$", text, re.MULTILINE), "the theme would load Google Fonts"


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    """The whole site, the API reference from the docstrings included (about 5 s of CPU;
    mkdocstrings reads the sources, it imports nothing)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    command = [*offline_prefix(), sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
    command += ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")]
    done = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "environment" / "index.html").is_file()
    api = (site / "api" / "metrics" / "index.html").read_text(encoding="utf-8")
    assert "sharpe_ratio" in api, "the API reference lacks trader.metrics.sharpe_ratio"


PATH_PATTERN = r"`((?:benchmarks|tests|tools|market_envs|trader|tournament|podracer|dashboards|datasets)/[\w./-]+\.(?:py|md|toml|csv|sh|c)\b)"


def named_paths(text: str) -> list[str]:
    """The repository files a page names in backquotes (``benchmarks/x.py``, ``trader/y.py``)."""
    import re

    return [path for path in re.findall(PATH_PATTERN, text) if "*" not in path]


def test_every_file_the_readme_and_the_guides_name_exists() -> None:
    """A page that names a script or module the tree no longer has (a removed one-off benchmark,
    a moved module) says something stale; the lab notebook, which cites commits, is left out."""
    pages = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").rglob("*.md")) if "notebook" not in p.parts)]
    stale = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in pages
        for path in named_paths(page.read_text())
        if not (ROOT / path).exists()
    ]
    assert not stale, "\n".join(stale)


def test_the_path_check_sees_a_stale_citation() -> None:
    assert named_paths("run `benchmarks/gone.py --x` or `trader/rundir.py`; not `benchmarks/*.py`") == [
        "benchmarks/gone.py",
        "trader/rundir.py",
    ]
