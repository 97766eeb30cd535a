"""Settings: one home folder, an optional ``config.yaml`` in it, environment overrides.

The file accepts DeerFlow's keys (``memory.*``, ``summarization.*``, ``subagents.*``)
plus model settings. Unknown keys and wrong types are rejected with one line that
names the key and the file, because a silently ignored typo is worse than an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .projects import PROJECT_ENV, project_name

HOME_ENV = "DEERFLOW_NB_HOME"
CONFIG_FILENAME = "config.yaml"
MEMORY_FILENAME = "memory.json"
JOURNAL_FILENAME = "journal.db"


class ConfigError(ValueError):
    """A config.yaml problem, phrased as one line that names the key and the file.

    The message never shows a secret: a value that looks like an API key (``sk-…``,
    ``Bearer …``), or any value given for a ``…key`` setting, is left out."""

    def __init__(self, message: str = "", *args: Any) -> None:
        super().__init__(_without_secrets(str(message)), *args)


_KEY_SETTING = re.compile(r"'[\w.\[\]]*(?:api_key|_key|token|secret)[\w\[\]]*'", re.IGNORECASE)
_SHOWN_VALUE = re.compile(r"(, got ).*$", re.DOTALL)


def _without_secrets(message: str) -> str:
    from .scrub import redact

    if _KEY_SETTING.search(message):  # whatever value a key setting got stays unshown
        message = _SHOWN_VALUE.sub(r"\1a value not shown (it may be a key)", message)
    return redact(message)


class HomeError(ConfigError):
    """The home folder, or its journal, cannot be used as it is; one line naming the fix."""


@dataclass
class ContextSize:
    """DeerFlow's ``{type, value}`` size: a token count, a message count or a window fraction."""

    type: Literal["tokens", "messages", "fraction"] = "messages"
    value: float = 20


@dataclass
class ModelConfig:
    """The chat model. No key and no base URL means the embedded offline model."""

    name: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    send_openai_key_to_base_url: bool = False
    max_input_tokens: int = 128_000
    timeout_seconds: float = 60.0
    max_retries: int = 3


@dataclass
class MemoryConfig:
    """DeerFlow's ``memory.*`` keys with DeerFlow's defaults."""

    enabled: bool = True
    debounce_seconds: float = 30.0
    model_name: str | None = None
    max_facts: int = 100
    fact_confidence_threshold: float = 0.7
    injection_enabled: bool = True
    max_injection_tokens: int = 2000
    embeddings: str | None = None
    review: bool = False
    # Issue 20: a fact neither confirmed nor used for this many days is proposed for removal
    # (goals and current activities after a third of it); see memory/aging.py.
    staleness_days: float = 180.0
    # Over max_facts: "blend" (confidence, confirmation freshness, use; corrections kept
    # last) or "confidence" (DeerFlow's: the least confident first).
    eviction: Literal["blend", "confidence"] = "blend"


@dataclass
class SummarizationConfig:
    """DeerFlow's ``summarization.*`` keys."""

    enabled: bool = True
    model_name: str | None = None
    trigger: list[ContextSize] = field(
        default_factory=lambda: [ContextSize(type="fraction", value=0.8)]
    )
    keep: ContextSize = field(default_factory=lambda: ContextSize(type="messages", value=20))
    trim_tokens_to_summarize: int = 4000
    summary_prompt: str | None = None


@dataclass
class SubagentsConfig:
    """Limits for ``task`` sub-agents."""

    enabled: bool = True
    max_concurrent: int = 3
    max_per_turn: int = 6
    max_turns: int = 8
    timeout_seconds: float = 120.0


@dataclass
class AgentConfig:
    """The lead agent's own limits."""

    max_turns: int = 12
    allow_code_execution: bool = False


@dataclass
class Settings:
    """Everything configurable, resolved from defaults, config.yaml and the environment."""

    home: Path = field(default_factory=lambda: default_home())
    model: ModelConfig = field(default_factory=ModelConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    summarization: SummarizationConfig = field(default_factory=SummarizationConfig)
    subagents: SubagentsConfig = field(default_factory=SubagentsConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    # ``project:`` in config.yaml: every notebook on this home in one project (projects.py).
    project: str | None = None

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


def default_home() -> Path:
    """``$DEERFLOW_NB_HOME`` or ``~/.deerflow_nb``."""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".deerflow_nb"


def resolve_home(home: str | os.PathLike[str] | None) -> Path:
    return Path(home).expanduser() if home is not None else default_home()


_TOP_SECTIONS = {
    "model": ModelConfig,
    "memory": MemoryConfig,
    "summarization": SummarizationConfig,
    "subagents": SubagentsConfig,
    "agent": AgentConfig,
}


def _build(cls: type, raw: dict[str, Any], section: str, source: Path) -> Any:
    """The section's dataclass from its config.yaml mapping, checked by the typed schema
    (``deerflow_nb.schema``: types, ``Field(ge=…, le=…)`` bounds, unknown keys); keys the
    file leaves out keep their defaults."""
    from .schema.settings import check_settings_section

    values = check_settings_section(section, raw, source)
    for key, value in values.items():
        if isinstance(value, list):
            values[key] = [_size(v) for v in value]
        else:
            values[key] = _size(value)
    return cls(**values)


def _size(value: Any) -> Any:
    """A checked ``{type, value}`` model as the ``ContextSize`` the agent uses."""
    from .schema.settings import ContextSizeSettings

    if isinstance(value, ContextSizeSettings):
        return ContextSize(type=value.type, value=float(value.value))
    return value


def parse_embeddings_spec(spec: str) -> tuple[str, str]:
    """``memory.embeddings`` as ``(kind, name)``: ``openai:<model>`` or ``local:<name or
    path>``; anything else is a ConfigError that shows both forms."""
    kind, _, name = spec.strip().partition(":")
    if kind not in ("local", "openai") or not name.strip():
        raise ConfigError(
            f"memory.embeddings {spec!r} must be 'openai:<model>' or 'local:<name or path>'"
        )
    return kind, name.strip()


def load_settings(home: str | os.PathLike[str] | None = None) -> Settings:
    """Read ``config.yaml`` under the home folder (if any) and apply environment overrides."""
    home_path = resolve_home(home)
    if home_path.exists() and not home_path.is_dir():
        raise HomeError(
            f"the deerflow_nb home {home_path} is a file, not a folder; point "
            f"{HOME_ENV} (or --home) at a folder"
        )
    settings = Settings(home=home_path)
    path = home_path / CONFIG_FILENAME
    if path.exists():
        import yaml

        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            where = f" line {line + 1}" if line is not None else ""
            raise ConfigError(f"{path}:{where} is not valid YAML; fix or delete the file") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        for section, values in raw.items():
            if section == "project":
                from .schema.settings import check_project

                settings.project = check_project(values, path)
                continue
            if section not in _TOP_SECTIONS:
                known = ", ".join(sorted([*_TOP_SECTIONS, "project"]))
                raise ConfigError(f"{path}: unknown key '{section}' (known: {known})")
            if values is None:
                continue
            if not isinstance(values, dict):
                raise ConfigError(f"{path}: '{section}' must be a mapping, got {values!r}")
            setattr(settings, section, _build(_TOP_SECTIONS[section], values, section, path))
        if settings.memory.embeddings:  # said when the file is read, not at the first search
            try:
                parse_embeddings_spec(settings.memory.embeddings)
            except ConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
    _apply_env(settings)
    from .scrub import remember_secret

    remember_secret(settings.model.api_key)  # redact hides it wherever it is echoed
    remember_secret(settings.model.base_url)  # the password of a user:pass@ URL
    return settings


def _apply_env(settings: Settings) -> None:
    """Environment variables win over the file.

    The ambient ``OPENAI_API_KEY`` is meant for api.openai.com; it is not sent to a
    custom base URL unless ``model.send_openai_key_to_base_url`` says so, so a key is
    never leaked to a local or third-party server by accident.
    """
    env = os.environ
    model = settings.model
    if env.get("OPENAI_BASE_URL"):
        model.base_url = env["OPENAI_BASE_URL"]
    if env.get("DEERFLOW_NB_MODEL"):
        model.name = env["DEERFLOW_NB_MODEL"]
    if env.get(PROJECT_ENV, "").strip():  # this kernel's project (projects.py)
        try:
            settings.project = project_name(env[PROJECT_ENV])
        except ValueError as exc:
            raise ConfigError(f"{PROJECT_ENV}: {exc}") from None
    if env.get("DEERFLOW_NB_MEMORY_MODEL"):
        settings.memory.model_name = env["DEERFLOW_NB_MEMORY_MODEL"]
    if env.get("DEERFLOW_NB_API_KEY"):
        model.api_key = env["DEERFLOW_NB_API_KEY"]
    elif (
        env.get("OPENAI_API_KEY")
        and not model.api_key
        and (not model.base_url or model.send_openai_key_to_base_url)
    ):
        model.api_key = env["OPENAI_API_KEY"]
