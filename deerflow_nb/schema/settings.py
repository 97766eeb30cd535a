"""Every setting, declared once: ``Settings`` and its sections as pydantic models.

Each section bounds its keys with ``Field(ge=…, le=…)`` and refuses unknown ones; the same
checks run on config.yaml (``parse_section``'s one-line ``ConfigError``) and on assignment
(``settings.memory.max_facts = 5``). ``config`` only finds and reads the file and applies
the environment; ``SETTINGS_SECTIONS`` feeds the README's table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from ..home import JOURNAL_FILENAME, MEMORY_FILENAME, ConfigError, default_home, short_repr


class _Section(BaseModel):
    """A config.yaml section: strict types, known keys only, checked on assignment too."""

    model_config = ConfigDict(
        extra="forbid", strict=True, defer_build=True, validate_assignment=True
    )


Seconds = Annotated[float, Field(allow_inf_nan=False)]


class ContextSizeSettings(_Section):
    """DeerFlow's ``{type, value}`` size: tokens, messages, or a fraction of the window."""

    type: Literal["tokens", "messages", "fraction"] = "messages"
    value: Annotated[float, Field(allow_inf_nan=False)] = 20

    def __init__(self, type: str = "messages", value: float = 20, /, **fields: Any) -> None:
        """Also positional, as the agent writes sizes: ``ContextSize("messages", 3)``."""
        super().__init__(**{"type": type, "value": value, **fields})

    @model_validator(mode="after")
    def _value_fits_type(self) -> ContextSizeSettings:
        if self.type == "fraction" and not 0 < self.value <= 1:
            raise ValueError(
                "is a fraction of the window, so its value must be above 0 and at most 1, "
                f"got {self.value!r}"
            )
        if self.type != "fraction" and self.value < 0:
            raise ValueError(
                f"counts {self.type}, so its value must be at least 0, got {self.value!r}"
            )
        return self


class ModelSettings(_Section):
    """The chat model. No key and no base URL means the embedded offline model."""

    name: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    send_openai_key_to_base_url: bool = False
    max_input_tokens: int = Field(128_000, ge=1)
    max_output_tokens: int = Field(1000, ge=32)
    timeout_seconds: Seconds = Field(60.0, ge=0.001)
    max_retries: int = Field(3, ge=0)


class MemorySettings(_Section):
    """DeerFlow's ``memory.*`` keys with DeerFlow's defaults.

    ``staleness_days``: a fact neither confirmed nor used for this long is proposed for
    removal (goals and current activities after a third of it; memory/updates/aging.py).
    ``eviction`` over ``max_facts``: "blend" (confidence, confirmation freshness, use;
    corrections kept last) or "confidence" (DeerFlow's: the least confident first)."""

    enabled: bool = True
    debounce_seconds: Seconds = Field(30.0, ge=0, le=86_400)  # more overflows the wait
    model_name: str | None = None
    max_facts: int = Field(100, ge=1)
    fact_confidence_threshold: Annotated[float, Field(allow_inf_nan=False)] = Field(0.7, ge=0, le=1)
    injection_enabled: bool = True
    max_injection_tokens: int = Field(2000, ge=1)
    embeddings: str | None = None
    review: bool = False
    review_outside_forget: bool = True  # an MCP client's forget waits for approval
    staleness_days: Annotated[float, Field(allow_inf_nan=False)] = Field(180.0, ge=1)
    eviction: Literal["blend", "confidence"] = "blend"


def _listify(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


class SummarizationSettings(_Section):
    """DeerFlow's ``summarization.*`` keys."""

    enabled: bool = True
    model_name: str | None = None
    trigger: Annotated[list[ContextSizeSettings], BeforeValidator(_listify)] = Field(
        default_factory=lambda: [ContextSizeSettings(type="fraction", value=0.8)]
    )
    keep: ContextSizeSettings = Field(
        default_factory=lambda: ContextSizeSettings(type="messages", value=20)
    )
    trim_tokens_to_summarize: int = Field(4000, ge=1)
    summary_prompt: str | None = None


class SubagentsSettings(_Section):
    """Limits for ``task`` sub-agents."""

    enabled: bool = True
    max_concurrent: int = Field(3, ge=1)
    max_per_turn: int = Field(6, ge=1)
    max_turns: int = Field(8, ge=1)
    timeout_seconds: Seconds = Field(120.0, ge=0.001)


class AgentSettings(_Section):
    """The lead agent's own limits."""

    max_turns: int = Field(12, ge=1)
    allow_code_execution: bool = False


SETTINGS_SECTIONS: dict[str, type[_Section]] = {
    "model": ModelSettings,
    "memory": MemorySettings,
    "summarization": SummarizationSettings,
    "subagents": SubagentsSettings,
    "agent": AgentSettings,
}


def check_project(raw: Any, source: Path | str) -> str | None:
    """config.yaml's top-level ``project:``: a name every notebook on the home uses."""
    from ..home import ConfigError
    from ..projects import check_project_name

    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ConfigError(f"{source}: 'project' must be a string, got {short_repr(raw)}")
    try:
        return check_project_name(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: 'project': {exc}") from None


def check_shared(raw: Any, source: Path | str) -> dict[str, str]:
    """config.yaml's ``shared:`` (project -> the team's PostgreSQL URL, as JupyterHub
    pre-configures it): URLs without a password (PGPASSWORD or ~/.pgpass holds it)."""
    from ..home import ConfigError
    from ..projects import check_project_name

    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"{source}: 'shared' must map project names to PostgreSQL URLs")
    out = {}
    for name, url in raw.items():
        from urllib.parse import urlsplit

        if not url.startswith(("postgresql://", "postgres://")) or urlsplit(url).password:
            raise ConfigError(
                f"{source}: 'shared.{name}' must be a postgresql://ROLE@HOST/DATABASE URL "
                "without a password (put the password in PGPASSWORD or ~/.pgpass)"
            )
        try:
            out[check_project_name(str(name))] = url
        except ValueError as exc:
            raise ConfigError(f"{source}: 'shared': {exc}") from None
    return out


class Settings(BaseModel):
    """Everything configurable, resolved from defaults, config.yaml and the environment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)

    home: Path = Field(default_factory=default_home)
    model: ModelSettings = Field(default_factory=ModelSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    summarization: SummarizationSettings = Field(default_factory=SummarizationSettings)
    subagents: SubagentsSettings = Field(default_factory=SubagentsSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    # ``project:`` in config.yaml: every notebook on this home in one project (projects.py).
    project: str | None = None
    # ``shared:`` in config.yaml: project -> the team's PostgreSQL URL (memory/sharing.py).
    shared: dict[str, str] = Field(default_factory=dict)

    @property
    def memory_path(self) -> Path:
        return self.home / MEMORY_FILENAME

    @property
    def journal_path(self) -> Path:
        return self.home / JOURNAL_FILENAME

    @property
    def is_offline(self) -> bool:
        """True when the model is "offline", or nothing names one (no name, key or base URL):
        the embedded model runs. A model named without a key is an error when used, not a
        silent switch to the offline model."""
        model = self.model
        return model.name == "offline" or not (model.name or model.api_key or model.base_url)

    @property
    def chat_model_name(self) -> str:
        if self.is_offline:
            return "offline"
        return self.model.name or "gpt-4o-mini"

    @property
    def memory_model_name(self) -> str:
        return self.memory.model_name or self.chat_model_name


def parse_section(section: str, raw: Any, source: Path | str) -> _Section:
    """One config.yaml section as its checked model (keys left out keep their defaults),
    or ``ConfigError`` naming the key and the file."""
    model = SETTINGS_SECTIONS[section]
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: '{section}' must be a mapping, got {short_repr(raw)}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_settings_problem(exc, section, model)}") from None


_TYPE_WORDS = {
    "bool_type": "true or false",
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "list_type": "a list",
}


def _settings_problem(exc: ValidationError, section: str, model: type[BaseModel]) -> str:
    error = exc.errors(include_url=False)[0]
    loc = [section, *error["loc"]]
    # A union (str | None) reports its member; the key is the path without the member name.
    loc = [p for p in loc if p not in ("str", "int", "float", "bool", "list[ContextSizeSettings]")]
    key = ".".join(str(p) for p in loc if not isinstance(p, int))
    for i, part in enumerate(loc):
        if isinstance(part, int):
            key = (
                ".".join(str(p) for p in loc[:i])
                + f"[{part}]"
                + "".join(f".{p}" for p in loc[i + 1 :])
            )
            break
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        owner = model if len(loc) == 2 else ContextSizeSettings
        known = ", ".join(sorted(owner.model_fields))
        return f"unknown key '{key}' (known: {known})"
    if kind == "finite_number":
        return f"'{key}' must be a finite number, got {short_repr(value)}"
    if kind in ("greater_than_equal", "less_than_equal"):
        low, high = _bounds(model, loc)
        shown = float(value) if isinstance(value, float) or _is_float_field(model, loc) else value
        if high is not None:
            return f"'{key}' must be from {low:g} to {high:g}, got {short_repr(shown)}"
        return f"'{key}' must be at least {low:g}, got {short_repr(shown)}"
    if kind == "literal_error":
        return f"'{key}' must be one of {ctx.get('expected', '')}, got {short_repr(value)}"
    if kind == "value_error":
        return f"'{key}' " + str(error.get("msg", "")).removeprefix("Value error, ")
    if kind in _TYPE_WORDS:
        return f"'{key}' must be {_TYPE_WORDS[kind]}, got {short_repr(value)}"
    return f"'{key}': {error.get('msg')} (got {short_repr(value)})"


def _field_info(model: type[BaseModel], loc: list[Any]) -> Any:
    if len(loc) != 2:
        return None
    return model.model_fields.get(str(loc[1]))


def _bounds(model: type[BaseModel], loc: list[Any]) -> tuple[float | None, float | None]:
    info = _field_info(model, loc)
    low = high = None
    for meta in getattr(info, "metadata", []):
        low = getattr(meta, "ge", low)
        high = getattr(meta, "le", high)
    return low, high


def _is_float_field(model: type[BaseModel], loc: list[Any]) -> bool:
    info = _field_info(model, loc)
    return info is not None and info.annotation is float
