"""``deerflow-nb doctor`` and ``%memory doctor``: what the configured models can do.

Each configured model gets a few short, capped probes: is the server there, does it
stream, does it call tools, does JSON mode give JSON, does a fixed probe conversation
give an extraction diff with valid items, and how large is its context window (when the
server says). The result is a :class:`DoctorReport`: a table of ✓/✗ with, for each ✗,
what to change. It reads text in a terminal and renders as escaped Markdown or HTML in
a notebook (model and server text is untrusted).

Probes against an OpenAI-compatible server go through the ``openai`` SDK directly, so
each can cap its reply (``max_tokens``) and see what the agent's client hides (chunks,
``finish_reason``); the offline model is probed through its ``ChatModel.chat``. A server
that cannot be reached at all raises :class:`Unreachable` (the CLI exits 2).

``checks`` holds the checks and ``run_doctor``, ``probe`` the capped calls to one model,
``report`` the table.
"""
