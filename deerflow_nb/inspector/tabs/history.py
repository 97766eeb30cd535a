"""The Confidence history tab: each fact's confidence over time, memory size, the event log."""

from __future__ import annotations

from typing import Any

import streamlit as st

from .. import data, view_models
from ..data import MemoryReader
from .markup import plain, project_picker, table, time_column

CHART_HEIGHT = 360  # the confidence chart's plot area, axis and legend not counted
LEGEND_MAX = 15  # facts named in the legend; more are told apart by tooltip and picker
# Up to ten facts: ten colours far apart (tableau20 pairs each hue with a paler one, so two
# chosen facts would get two near-identical blues); more: 20, never shared in a legend.
FEW_PALETTE, FEW = "tableau10", 10
PALETTE = "tableau20"
# The y axis sits this many pixels left of the plot: a mark at the left edge (size 110,
# radius about 6 px) never covers a tick label such as 0.9.
AXIS_OFFSET = 10
_MIN_SPAN_MS = 10 * 60 * 1000  # a time axis spans at least ten minutes


def _span_ms(times: Any) -> float:
    valid = times.dropna()
    return (valid.max() - valid.min()).total_seconds() * 1000 if not valid.empty else 0.0


def time_axis(times: Any, field: str = "ts") -> Any:
    """The time axis of a chart: UTC on a 24-hour clock, the date added when the data
    spans more than a day, and at least ten minutes wide (a demo's events, seconds apart,
    would otherwise get ticks every few milliseconds)."""
    import altair as alt

    valid = times.dropna()
    if valid.empty:
        return alt.X(f"{field}:T", title="time (UTC)")
    low, high = valid.min(), valid.max()
    pad = max(pd_timedelta(0), pd_timedelta(_MIN_SPAN_MS) - (high - low)) / 2
    spec = "%H:%M" if (high - low).total_seconds() < 86_400 else "%Y-%m-%d %H:%M"

    def point(ts: Any) -> Any:  # a domain end (Streamlit's renderer drops plain numbers)
        ts = ts.tz_convert("UTC")
        return alt.DateTime(
            year=ts.year, month=ts.month, date=ts.day, hours=ts.hour, minutes=ts.minute,
            seconds=ts.second, milliseconds=ts.microsecond // 1000, utc=True,
        )  # fmt: skip

    # The label is written by ``utcFormat`` itself: Streamlit's renderer ignores an axis
    # ``format`` whose ``formatType`` is "utc" and falls back to a 12-hour clock.
    return alt.X(
        f"{field}:T",
        title="time (UTC)",
        scale=alt.Scale(type="utc", domain=[point(low - pad), point(high + pad)], nice=False),
        axis=alt.Axis(
            labelExpr=f"utcFormat(datum.value, '{spec}')",
            tickMinStep=60_000,  # never two ticks in one minute (their labels would repeat)
            labelOverlap=True,
            labelAngle=0,
            labelFlush=True,
        ),
    )


def pd_timedelta(ms: int) -> Any:
    import pandas as pd

    return pd.Timedelta(milliseconds=ms)


def _stamp(df: Any) -> Any:
    """``df`` with ``at``: its ``ts`` as ``YYYY-MM-DD HH:MM:SS`` text, for tooltips."""
    df["at"] = df["ts"].dt.strftime("%Y-%m-%d %H:%M:%S")
    return df


def history_page(reader: MemoryReader, memory: dict[str, Any] | None = None) -> None:
    """Each fact's confidence over time with additions and removals marked; memory size;
    the event log, each event naming its project. Every project's by default (a dashboard
    across projects), one project's with the user's own when picked, as the Facts tab."""
    import altair as alt

    project = project_picker(
        st,
        memory,
        "history_project",
        "A project's events come with those of the user's own facts and sections.",
    )
    events = data.events(reader, view_models.chosen_scope(project))
    points = view_models.confidence_series(events)
    st.subheader("Confidence over time")
    if not points:
        st.info(
            "No memory events yet: the history starts with the first fact.",
            icon=":material/show_chart:",
        )
    else:
        facts = sorted({p["fact"] for p in points})
        # The picker keeps clear of the chart's toolbar, drawn over the top right corner.
        picker, _ = st.columns([5, 1])
        chosen = picker.multiselect(
            "Facts",
            facts,
            key="history_facts",
            placeholder=f"all {len(facts)} facts",
            format_func=plain,
        )
        shown = view_models.dodge([p for p in points if not chosen or p["fact"] in chosen])
        df = _stamp(view_models.frame(shown, ("ts",)))
        named = len({p["fact"] for p in shown})
        legend = (
            alt.Legend(orient="bottom", direction="vertical", columns=1, labelLimit=0, title=None)
            if named <= LEGEND_MAX
            else None
        )
        # Points of one minute and confidence sit side by side, ``offset`` pixels apart: the
        # time moves by that many pixels' worth of the axis (``width`` is the plot's), so
        # an addition and a removal never overlap into a shape the legend lacks.
        span = max(_MIN_SPAN_MS, _span_ms(df["ts"]))  # the axis's width, in ms
        base = (
            alt.Chart(df)
            .transform_calculate(
                shown_ts=f"time(toDate(datum.ts)) + datum.offset * {span} / max(width, 1)"
            )
            .encode(
                x=time_axis(df["ts"], field="shown_ts"),
                y=alt.Y(
                    "confidence:Q",
                    scale=alt.Scale(domain=[0, 1]),
                    title="confidence",
                    axis=alt.Axis(offset=AXIS_OFFSET),
                ),
                color=alt.Color(
                    "fact:N",
                    legend=legend,
                    scale=alt.Scale(scheme=FEW_PALETTE if named <= FEW else PALETTE),
                ),
            )
        )
        marks = base.mark_point(
            filled=True, size=110, opacity=0.95, stroke="white", strokeWidth=1
        ).encode(
            shape=alt.Shape(
                "event:N",
                scale=alt.Scale(
                    domain=["added", "changed", "removed"],
                    range=["triangle-up", "circle", "cross"],
                ),
                title="event",
                legend=alt.Legend(
                    orient="right", symbolFillColor="#555", symbolStrokeColor="#555", symbolSize=110
                ),
            ),
            tooltip=["fact", "event", "kind", alt.Tooltip("confidence:Q", format=".2f"),
                     alt.Tooltip("at:N", title="time (UTC)"), "source"],
        )  # fmt: skip
        # The chart's height holds the axis and the legend too: add room for them.
        height = CHART_HEIGHT + 60 + (22 * named + 10 if legend is not None else 0)
        st.altair_chart(
            (base.mark_line(strokeWidth=1.5, opacity=0.6) + marks).properties(height=height),
            key="history_chart",
        )
        if legend is None:
            st.caption(
                f"{named} facts: hover a point to see which, or pick facts above to name them "
                "in a legend."
            )
        counts = {k: sum(p["event"] == k for p in shown) for k in ("added", "changed", "removed")}
        st.caption(
            f"{counts['added']} added (triangles) · {counts['changed']} changed (circles) · "
            f"{counts['removed']} removed (crosses)"
        )
    sizes = data.size_series(reader)
    st.subheader("Memory size over time")
    if sizes:
        df = _stamp(view_models.frame(sizes, ("ts",)))
        size_chart = (
            alt.Chart(df)
            .mark_line(interpolate="step-after", point=True)
            .encode(
                x=time_axis(df["ts"]),
                y=alt.Y("facts:Q", title="facts"),
                tooltip=[
                    "version",
                    "reason",
                    "facts",
                    "kilobytes",
                    alt.Tooltip("at:N", title="time (UTC)"),
                ],
            )  # fmt: skip
            .properties(height=260)
        )
        st.altair_chart(size_chart, key="size_chart")
    else:
        st.caption("No saved versions yet.")
    if events:
        with st.expander(f"Event log ({len(events)})"):
            table(
                view_models.frame(view_models.event_rows(events), ("time",)),
                column_config={
                    "time": time_column("time"),
                    "kind": st.column_config.TextColumn("kind", width=80),
                    "fact": st.column_config.TextColumn("fact", width=110),
                    "project": st.column_config.TextColumn("project", width=85),
                    "by": st.column_config.TextColumn("by", width=90),
                    # the project column's width came from here: the log fits 1280 px
                    "change": st.column_config.TextColumn("change", width=350),
                    "confidence": st.column_config.TextColumn("confidence", width=100),
                    "source": st.column_config.TextColumn("source", width=120),
                },
            )
