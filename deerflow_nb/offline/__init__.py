"""The embedded offline model (no key, no network), its extraction and consolidation
rules, and the loopback OpenAI-compatible server that serves it. At the edge: it uses
the model interface (``llm.base``) and the text helpers, and nothing imports it but the
model factory (``llm.get_chat_model``) and the command line."""
