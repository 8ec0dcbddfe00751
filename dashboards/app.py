"""The podracer-trader dashboard: ``trader dashboard [RUNS_DIR]`` or ``streamlit run dashboards/app.py``.

A Streamlit multipage app over run directories (docs/contracts.md): strategies,
significance (is the edge real?), tournament, walk-forward, paper trading, the seed
paper's experiment, training and data. It reads only the runs folder's files
(`dashboards.runs`); the figures are plain functions (`dashboards.figures`), the
pages in ``app_pages/`` arrange them. Every page, the first opened by a link too, runs
through this script: the same wide layout and the same titled sidebar
(`dashboards.app_pages`).
"""

from __future__ import annotations

import streamlit as st

from dashboards.app_pages import PAGES, path

st.set_page_config(page_title="podracer-trader", layout="wide")

NAVIGATION = [st.Page(str(path(page)), title=page.title, default=number == 0) for number, page in enumerate(PAGES)]

st.navigation(NAVIGATION).run()
