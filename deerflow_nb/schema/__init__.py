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
- ``settings``: ``check_settings_section(name, raw, source)``, one config.yaml section
  validated against ``Field(ge=…, le=…)`` bounds, as a dict of values, or ``ConfigError``.

Those three import pydantic (tens of milliseconds), so nothing on the ``%load_ext`` path
imports them: ``config`` loads them only when a config.yaml exists, the memory package
when it is first used.
"""
