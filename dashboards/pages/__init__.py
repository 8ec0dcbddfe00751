"""The dashboard's pages: scripts that st.navigation runs by path (dashboards/app.py)."""
