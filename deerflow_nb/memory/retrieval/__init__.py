"""Finding what is relevant: terms, dates, BM25 and dense vectors into a fact's score for a
turn (``ranking``), the ``<memory>`` block packed under its token budget (``injection``),
and the search of the journal's conversations (``recall``), each behind a relevance floor."""
