"""The Injection preview tab: the exact <memory> block for a context and budget, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from ...config import ConfigError, load_settings
from .. import data, view_models
from .markup import md, plain, table


def home_embedder(home: str) -> Any:
    """The home's embedder, loaded once per home and setting for the app's lifetime; None
    when ``memory.embeddings`` is unset or unusable here (the injection page says why)."""
    try:
        spec = load_settings(Path(home)).memory.embeddings
        return _embedder(home, spec) if spec else None
    except (ConfigError, ImportError, OSError):
        return None


@st.cache_resource(show_spinner="Loading the embedding model…")
def _embedder(home: str, spec: str) -> Any:
    """One embedder per home and setting for the app's lifetime (models are slow to load)."""
    return data.embedder_for(Path(home))


def injection_page(home: Path, memory: dict[str, Any] | None) -> None:
    """The exact <memory> block for a context and budget, and why each fact made it in."""
    embedder = None
    try:
        settings = load_settings(home)
        budget = settings.memory.max_injection_tokens
        if settings.memory.embeddings:
            embedder = _embedder(str(home), settings.memory.embeddings)
    except ConfigError as exc:
        st.warning(f"config.yaml: {md(exc)}; previewing with the default settings.")
        budget = 2000
    except (ImportError, OSError) as exc:
        st.warning(
            f"Embeddings are configured but unavailable here ({md(exc)}); lexical ranking only."
        )
    # Project names are untrusted text: plain labels, never Markdown.
    project = st.selectbox(
        "Project: the notebook's project the turn runs in",
        view_models.project_choices(memory, everything=False),
        key="inject_project",
        format_func=plain,
        help="The block holds the user's facts and this project's, never another project's.",
    )
    context = st.text_area(
        "Context: the next message or cell the agent will see",
        key="inject_context",
        placeholder="e.g. plot the sales data with my usual dataframe library",
    )
    max_tokens = st.slider("Token budget", 0, max(8000, budget), budget, 50, key="inject_budget")
    if memory is None:
        st.info(
            "Nothing would be injected: there is no readable memory.json.", icon=":material/eco:"
        )
        return
    turn = view_models.turn_project(project)
    explained = data.injection(home, context or None, max_tokens, project=turn, embedder=embedder)
    preview = view_models.injection_preview(*explained)
    c1, c2 = st.columns(2)
    c1.metric("Tokens in the block", f"{preview['tokens']} / {max_tokens}")
    c2.metric("Facts included", f"{len(preview['facts'])} / {preview['total_facts']}")
    if preview["block"]:
        st.code(preview["block"], language="xml", wrap_lines=True)
    else:
        st.info("The block is empty: nothing fits this budget, or memory is empty.")
    if preview["facts"]:
        st.markdown(
            "**Why these facts**, in the order of the block: `total` combines relevance, "
            "confidence, recency and specificity; `rank` is the fact's place in the whole ranking."
        )
        dense = any(f["dense"] is not None for f in preview["facts"])
        score = {
            name: st.column_config.NumberColumn(name, format="%.3f", width=90)
            for name in ("total", "relevance", "lexical", "dense", "confidence", "recency",
                         "specificity")
        }  # fmt: skip
        table(
            view_models.frame(preview["facts"]),
            column_order=(
                "rank", "content", "total", "relevance", "confidence", "recency", "specificity",
                "lexical", *(("dense",) if dense else ()), "id",
            ),
            column_config={
                "rank": st.column_config.NumberColumn("rank", width=55),
                "content": st.column_config.TextColumn("content", width=360),
                "id": st.column_config.TextColumn("id", width=110),
                **score,
            },
        )  # fmt: skip
