"""What ``deerflow-nb inspect`` serves: the inspector page (``app.py``) as a Streamlit
``st.App``, so that every request passes the loopback Host check first (``hosts.py``)."""

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from deerflow_nb.inspector.hosts import LoopbackHostMiddleware

app = st.App(
    str(Path(__file__).with_name("app.py")), middleware=[Middleware(LoopbackHostMiddleware)]
)
