"""The Streamlit memory inspector: what the agent knows, how that changed, what it injects.

``data`` holds the read-only view models (plain lists and dicts, no streamlit), ``pages``
renders them, ``app`` is the Streamlit script and ``launch`` starts ``streamlit run``.
Importing ``deerflow_nb`` never imports this package, so the kernel stays light.
"""
