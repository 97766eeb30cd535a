"""Streamlit rendering of the inspector: one module per tab, plus the shared frame.

The pages only lay out what ``data`` computes and hand writes to ``actions``. Writes
are asked for with one click and carried out with a second (the confirmation), both in
widget callbacks, so the page that follows already reads the files as they now are; the
one exception is the Approve or Reject button of a single pending change or of one item
of it, which names what it acts on (approving or rejecting them all asks first). The recall search
(Threads tab) also goes through ``actions``: ``Memory.recall`` catches its index up.

Everything read from the home (memory.json, journal.db, config errors, exception
messages) is untrusted: a prompt injection or an imported memory.json can hold
``![](http://…)`` or ``<img onerror=…>``. Streamlit renders Markdown in ``st.markdown``,
captions, alerts, expander and metric labels, and loads any image it finds there. So
such text reaches those only through ``md``/``md_lines`` (every ASCII punctuation
backslash-escaped: literal in CommonMark) or ``code`` (an id or path in code style when
it is plain, escaped otherwise); option labels of a select box are plain text and go
through ``plain`` (a radio's options are Markdown: ``md``); tables (``st.dataframe``)
and ``st.code`` show text as text. ``unsafe_allow_html`` is never used.

``frame`` draws the page and its tabs (``main``), ``markup`` turns untrusted text into
Markdown, ``confirm`` carries out the writes a user confirmed; ``facts``, ``pending``,
``history``, ``injection``, ``threads``, ``versions`` and ``status`` are the tabs.
"""
