"""The read side's helpers: what ``reader.py`` decodes the journal's rows with (fold
records, use records, versions, events, review items, eviction order) and the export file.

Nothing here imports the write side (``updates/``, ``folding/``, ``api.py`` …: the list is
in ``tests/test_architecture.py``); the write side imports these instead."""
