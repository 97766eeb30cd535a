"""What ``%memory`` and the panel display: one frozen view per thing shown, three readings each.

Each view renders as Markdown and HTML in a notebook, and as plain text from
``str()``/``repr()`` in a terminal, a log or a test assertion. The views hold plain data
and never call the ``Memory`` API (the few ``*_view(memory, …)`` builders read it once),
so a view shows exactly what was read at that moment.

Fact text, summaries, events, pending diffs, journal messages and errors come from
memory.json and the journal, which a model or an imported file wrote: untrusted. Every
reading is inert: Markdown cells are literal (``escape_markdown``: an ``![](http://…)`` or
``<img onerror>`` in a fact is shown, not loaded), HTML is escaped (``escape_html``), code
blocks are fenced so nothing inside closes them, and plain text has no control characters
(``clean_text``).
"""
