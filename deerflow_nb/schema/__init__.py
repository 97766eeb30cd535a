"""The typed schema: DeerFlow's memory.json, the extraction diff, and config.yaml's settings.

``constants`` holds the fixed names (sections, categories, prompt tags) and imports no
pydantic, so light modules may use it. The rest are pydantic v2 models with DeerFlow's
field names as aliases (``newFacts``, ``factsToRemove``, ``shouldUpdate``, ``createdAt``
…), and one check each:

- ``diff``: ``ExtractionDiff.parse(raw)``, a model's diff checked **per item**. An invalid
  fact, removal or section is left out with a reason (``LeftOut``) and the valid rest is
  kept; only a reply that is not a diff at all raises ``NotADiff``.
- ``document``: ``memory_problem(data)``, why a memory.json document cannot be used, in one
  line, or None.
- ``settings``: ``Settings`` and its sections, every setting declared once;
  ``parse_section(name, raw, source)`` checks one config.yaml section against its
  ``Field(ge=…, le=…)`` bounds, or raises ``ConfigError``.

Those three import pydantic (tens of milliseconds), so nothing on the ``%load_ext`` path
imports them: ``config`` loads the settings when they are first loaded, the memory package
when it is first used.
"""
