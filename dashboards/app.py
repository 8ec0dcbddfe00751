"""The podracer-trader dashboard: ``trader dashboard [RUNS_DIR]`` or ``streamlit run dashboards/app.py``.

A Streamlit multipage app over run directories (docs/contracts.md): strategies,
significance (is the edge real?), tournament, walk-forward, paper trading, the seed
paper's experiment, training and data. It reads only the runs folder's files
(`dashboards.runs`); the figures are plain functions (`dashboards.figures`), the
pages in ``pages/`` arrange them.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent

st.set_page_config(page_title="podracer-trader", layout="wide")

PAGES = [
    st.Page(str(HERE / "pages" / "strategies.py"), title="Strategies", default=True),
    st.Page(str(HERE / "pages" / "significance.py"), title="Is the edge real?"),
    st.Page(str(HERE / "pages" / "tournament.py"), title="Tournament"),
    st.Page(str(HERE / "pages" / "walkforward.py"), title="Walk-forward"),
    st.Page(str(HERE / "pages" / "paper.py"), title="Paper trading"),
    st.Page(str(HERE / "pages" / "experiment.py"), title="The paper's experiment"),
    st.Page(str(HERE / "pages" / "training.py"), title="Training"),
    st.Page(str(HERE / "pages" / "data.py"), title="Data"),
]

st.navigation(PAGES).run()
