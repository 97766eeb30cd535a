"""Finding and loading the settings: the home folder, its optional ``config.yaml``, and
environment overrides (the settings are declared in ``schema/settings.py``).

The file accepts DeerFlow's keys (``memory.*``, ``summarization.*``, ``subagents.*``)
plus model settings. Unknown keys and wrong types are rejected with one line that
names the key and the file, because a silently ignored typo is worse than an error.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .home import (
    CONFIG_FILENAME,
    HOME_ENV,
    JOURNAL_FILENAME,
    MEMORY_FILENAME,
    ConfigError,
    HomeError,
    default_home,
    resolve_home,
    short_repr,
)
from .projects import PROJECT_ENV, check_project_name

if TYPE_CHECKING:
    from pathlib import Path

    from .schema.settings import Settings

__all__ = [
    "CONFIG_FILENAME",
    "HOME_ENV",
    "JOURNAL_FILENAME",
    "MEMORY_FILENAME",
    "ConfigError",
    "HomeError",
    "default_home",
    "load_settings",
    "parse_embeddings_spec",
    "resolve_home",
]

# The settings themselves are declared once, as pydantic models in ``schema/settings.py``;
# these names stay importable from here (DESIGN's public names), loaded on first use so that
# importing ``config`` (``%load_ext`` does) does not import pydantic.
_DECLARED = {
    "Settings": "Settings",
    "ModelConfig": "ModelSettings",
    "MemoryConfig": "MemorySettings",
    "SummarizationConfig": "SummarizationSettings",
    "SubagentsConfig": "SubagentsSettings",
    "AgentConfig": "AgentSettings",
    "ContextSize": "ContextSizeSettings",
}


def __getattr__(name: str) -> Any:
    if name in _DECLARED:
        from .schema import settings

        return getattr(settings, _DECLARED[name])
    raise AttributeError(f"module 'deerflow_nb.config' has no attribute {name!r}")


def parse_embeddings_spec(spec: str) -> tuple[str, str]:
    """``memory.embeddings`` as ``(kind, name)``: ``openai:<model>`` or ``local:<name or
    path>``; anything else is a ConfigError that shows both forms."""
    kind, _, name = spec.strip().partition(":")
    if kind not in ("local", "openai") or not name.strip():
        raise ConfigError(
            f"memory.embeddings {short_repr(spec)} must be 'openai:<model>' or "
            "'local:<name or path>'"
        )
    return kind, name.strip()


def load_settings(home: str | os.PathLike[str] | None = None) -> Settings:
    """Read ``config.yaml`` under the home folder (if any) and apply environment overrides."""
    from .schema.settings import SETTINGS_SECTIONS, Settings, parse_section

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
            raw = _read_yaml(path.read_text(encoding="utf-8"), path) or {}
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            where = f" line {line + 1}" if line is not None else ""
            raise ConfigError(f"{path}:{where} is not valid YAML; fix or delete the file") from exc
        except UnicodeDecodeError:
            raise ConfigError(
                f"{path} is not UTF-8 text; save it as UTF-8 (or delete it for the defaults)"
            ) from None
        except OSError as exc:  # a folder of that name, a file this user cannot read
            raise ConfigError(
                f"{path} cannot be read ({exc.strerror or exc}); make it a readable file "
                "or remove it for the defaults"
            ) from None
        if not isinstance(raw, dict):
            raise ConfigError(
                f"{path}: the top level must be a mapping of sections (memory:, model:, ...), "
                f"got {short_repr(raw)}"
            )
        for section, values in raw.items():
            if section == "project":
                from .schema.settings import check_project

                settings.project = check_project(values, path)
                continue
            if section == "shared":
                from .schema.settings import check_shared

                settings.shared = check_shared(values, path)
                continue
            if section not in SETTINGS_SECTIONS:
                known = ", ".join(sorted([*SETTINGS_SECTIONS, "project", "shared"]))
                raise ConfigError(f"{path}: unknown key '{section}' (known: {known})")
            if values is None:
                continue
            setattr(settings, section, parse_section(section, values, path))
        if settings.memory.embeddings:  # said when the file is read, not at the first search
            try:
                parse_embeddings_spec(settings.memory.embeddings)
            except ConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
    _apply_env(settings)
    from .scrub import remember_secret

    remember_secret(settings.model.api_key)  # redact hides it wherever it is echoed
    if settings.model.base_url:
        check_base_url(settings.model.base_url)
    remember_secret(settings.model.base_url)  # the password of a user:pass@ URL
    return settings


def _read_yaml(text: str, path: Path) -> Any:
    """``text`` as ``yaml.safe_load`` reads it, except that a key given twice in one
    mapping (two ``memory:`` sections) is a ConfigError naming it and its line: PyYAML
    would keep the last one silently."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # <<: an anchor's keys
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    twice = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: PyYAML's own error says it
                    continue
                if twice:
                    shown = f"`{key}`" if isinstance(key, str) else short_repr(key)
                    fix = (
                        "merge the two sections"
                        if isinstance(value_node, yaml.MappingNode)
                        else "keep one of the two"
                    )
                    line = key_node.start_mark.line + 1
                    raise ConfigError(f"{path} line {line}: {shown} appears twice; {fix}")
            return super().construct_mapping(node, deep=deep)

    return yaml.load(text, Loader=UniqueKeys)  # a SafeLoader: no Python objects


def check_base_url(url: str) -> None:
    """``ConfigError`` in one line naming the fix for a base URL the HTTP client would fail
    on with a traceback (a port that is not a number, a password's unencoded ``/`` read as
    the end of the host); it never shows the password."""
    from urllib.parse import urlsplit

    from .scrub import redact, remember_secret

    where = "OPENAI_BASE_URL" if os.environ.get("OPENAI_BASE_URL") else "model.base_url"
    if "://" in url:  # its password is hidden wherever the message is echoed
        remember_secret(url)
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - parsing the port is the check
        stray_at = "@" in url.strip()[len(parts.scheme) + 3 + len(parts.netloc) :]
    except ValueError:
        stray_at = True
    if "://" not in url and (stray_at or not parts.hostname):
        raise ConfigError(  # it may be a key pasted in the wrong place: never quoted
            f"{where} is not a URL (no http:// or https://): write it as http://HOST:PORT/v1"
        )
    if stray_at or not parts.hostname:
        raise ConfigError(
            f"{where} {redact(url)!r} is not a valid URL: write it as "
            "http://HOST:PORT/v1 with a numeric port, and percent-encode a password in "
            "user:password@ (/ as %2F, @ as %40, : as %3A, # as %23, ? as %3F)"
        )


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
            settings.project = check_project_name(env[PROJECT_ENV])
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
