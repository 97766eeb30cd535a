"""The Streamlit script behind ``deerflow-nb inspect``; ``streamlit run`` executes this file."""

from deerflow_nb.inspector.pages.frame import main

main()
