"""The Streamlit script behind ``deerflow-nb inspect``; ``streamlit run`` executes this file."""

from deerflow_nb.inspector.tabs.frame import main

main()
