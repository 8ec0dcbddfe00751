"""The dashboard's pages: scripts that st.navigation runs by path (dashboards/app.py), and `PAGES`,
the one list of them that the app's navigation and the CLI's help for the dashboard are made from.

The folder is not called ``pages/``: beside the entry script that name turns on Streamlit's
pages-directory mode, and a fresh server then runs a page opened by its link without
dashboards/app.py (a narrow page with a sidebar of file names) until "/" is opened once.
No Streamlit and no torch here: the CLI reads `PAGES` for its help.

A page that can be empty says which command fills it: its module-level ``HINT``, the whole
command with ``RUN_DIR`` for the folder (`hints` reads them without running the pages).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).parent


class Page(NamedTuple):
    """One page of the dashboard."""

    script: str
    """The page's script in this folder; its stem is the page's URL path ("/" for the first)."""
    title: str
    """Its name in the sidebar and in the dashboard command's help."""


PAGES = (
    Page("strategies.py", "Strategies"),
    Page("significance.py", "Is the edge real?"),
    Page("tournament.py", "Tournament"),
    Page("walkforward.py", "Walk-forward"),
    Page("paper.py", "Paper trading"),
    Page("experiment.py", "The paper's experiment"),
    Page("training.py", "Training"),
    Page("data.py", "Data"),
)
"""Every page, in the sidebar's order; the first is the default page."""


def path(page: Page) -> Path:
    """The page's script."""
    return HERE / page.script


def titles() -> str:
    """The pages' titles as one phrase, for the CLI's help ("Strategies, Is the edge real?, ... and Data")."""
    names = [page.title for page in PAGES]
    return ", ".join(names[:-1]) + " and " + names[-1]


def hints() -> dict[str, str]:
    """Each page's empty-page command, its module-level ``HINT``, read from its script without
    running it: script name -> command (pages without one are left out)."""
    found = {}
    for page in PAGES:
        for node in ast.parse(path(page).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["HINT"]:
                found[page.script] = ast.literal_eval(node.value)
    return found
