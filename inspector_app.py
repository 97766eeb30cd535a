"""Streamlit memory inspector: `streamlit run inspector_app.py` (or `deerflow-nb inspect`)."""

from deerflow_nb.inspector.tabs.frame import main

main()
