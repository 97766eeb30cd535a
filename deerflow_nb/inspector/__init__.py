"""The Streamlit memory inspector: what the agent knows, how that changed, what it injects.

``data`` reads the home (memory.json, the journal read-only), ``view_models`` shapes what
it reads into rows and series (plain lists and dicts, no streamlit), ``tabs`` renders
them (not ``pages/``: Streamlit would list a folder of that name beside the script as
pages of its own), ``app`` is the Streamlit script and ``launch`` starts ``streamlit
run``. Importing ``deerflow_nb`` never imports this package, so the kernel stays light.
"""
