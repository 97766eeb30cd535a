"""The embedded offline model (no key, no network), its extraction and consolidation
rules, and the loopback OpenAI-compatible server that serves it. At the edge: it uses
the model interface (``llm.base``) and the text helpers; nothing imports it but the
command line: the model factory finds it as the ``offline`` entry point of the
``deerflow_nb.providers`` group (``provider.py``), as it finds a third party's."""
