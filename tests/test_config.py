"""Settings: DeerFlow's defaults, config.yaml overrides, environment wins, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from deerflow_nb.config import ConfigError, ContextSize, load_settings
from deerflow_nb.llm import ModelError, get_chat_model


def write_config(home: Path, text: str) -> Path:
    path = home / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_match_deerflow(home: Path) -> None:
    settings = load_settings()
    assert settings.home == home
    assert settings.memory.debounce_seconds == 30
    assert settings.memory.max_facts == 100
    assert settings.memory.fact_confidence_threshold == 0.7
    assert settings.memory.max_injection_tokens == 2000
    assert settings.memory.enabled and settings.memory.injection_enabled
    assert settings.summarization.keep == ContextSize(type="messages", value=20)
    assert settings.summarization.trim_tokens_to_summarize == 4000
    assert settings.memory_path == home / "memory.json"
    assert settings.journal_path == home / "journal.db"


def test_no_key_means_offline(home: Path) -> None:
    settings = load_settings()
    assert settings.is_offline
    assert settings.chat_model_name == "offline"
    assert settings.memory_model_name == "offline"


def test_yaml_overrides_defaults(home: Path) -> None:
    write_config(
        home,
        """
memory:
  debounce_seconds: 5
  max_facts: 40
  model_name: gpt-4o-mini
summarization:
  keep: {type: tokens, value: 3000}
  trigger:
    - {type: messages, value: 50}
model:
  name: llama3
  base_url: http://localhost:11434/v1
""",
    )
    settings = load_settings()
    assert settings.memory.debounce_seconds == 5.0
    assert settings.memory.max_facts == 40
    assert settings.memory.fact_confidence_threshold == 0.7  # untouched keys keep defaults
    assert settings.summarization.keep == ContextSize(type="tokens", value=3000)
    assert settings.summarization.trigger == [ContextSize(type="messages", value=50)]
    assert not settings.is_offline
    assert settings.chat_model_name == "llama3"
    assert settings.memory_model_name == "gpt-4o-mini"


def test_environment_wins_over_the_file(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(home, "model:\n  name: from-file\n  base_url: http://file.example/v1\n")
    monkeypatch.setenv("DEERFLOW_NB_MODEL", "from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.example/v1")
    monkeypatch.setenv("DEERFLOW_NB_MEMORY_MODEL", "cheap-model")
    settings = load_settings()
    assert settings.model.name == "from-env"
    assert settings.model.base_url == "http://env.example/v1"
    assert settings.memory_model_name == "cheap-model"


def test_ambient_openai_key_goes_only_to_openai(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ambient")
    assert load_settings().model.api_key == "sk-ambient"

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert load_settings().model.api_key is None

    write_config(home, "model:\n  send_openai_key_to_base_url: true\n")
    assert load_settings().model.api_key == "sk-ambient"

    monkeypatch.setenv("DEERFLOW_NB_API_KEY", "sk-explicit")
    assert load_settings().model.api_key == "sk-explicit"


def test_explicit_home_argument(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    write_config(other, "memory:\n  max_facts: 7\n")
    assert load_settings(other).memory.max_facts == 7
    assert load_settings().memory.max_facts == 100


def one_line_error(home: Path, text: str) -> str:
    path = write_config(home, text)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_unknown_key_names_key_and_file(home: Path) -> None:
    message = one_line_error(home, "memory:\n  max_fact: 10\n")
    assert "'memory.max_fact'" in message
    assert "max_facts" in message  # the known keys help spot the typo


def test_unknown_section_names_it(home: Path) -> None:
    assert "'memmory'" in one_line_error(home, "memmory:\n  enabled: false\n")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("memory:\n  max_facts: lots\n", "memory.max_facts"),
        ("memory:\n  enabled: 'yes'\n", "memory.enabled"),
        ("memory:\n  debounce_seconds: true\n", "memory.debounce_seconds"),
        ("summarization:\n  keep: {type: pages, value: 3}\n", "summarization.keep.type"),
        ("model:\n  timeout_seconds: [1]\n", "model.timeout_seconds"),
        ("memory: 5\n", "memory"),
    ],
)
def test_wrong_type_names_key_and_file(home: Path, text: str, key: str) -> None:
    assert f"'{key}'" in one_line_error(home, text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "memory:\n  fact_confidence_threshold: 7\n",
            "'memory.fact_confidence_threshold' must be from 0 to 1, got 7.0",
        ),
        ("memory:\n  max_facts: 0\n", "'memory.max_facts' must be at least 1, got 0"),
        (
            "memory:\n  debounce_seconds: -5\n",
            "'memory.debounce_seconds' must be from 0 to 86400, got -5.0",
        ),
        (
            "memory:\n  debounce_seconds: 100000\n",
            "'memory.debounce_seconds' must be from 0 to 86400, got 100000.0",
        ),
        ("memory:\n  debounce_seconds: .inf\n", "must be a finite number, got inf"),
        ("memory:\n  fact_confidence_threshold: .nan\n", "must be a finite number, got nan"),
        ("model:\n  timeout_seconds: .nan\n", "'model.timeout_seconds' must be a finite number"),
        (
            "memory:\n  max_injection_tokens: 0\n",
            "'memory.max_injection_tokens' must be at least 1",
        ),
        ("model:\n  max_retries: -1\n", "'model.max_retries' must be at least 0"),
        ("subagents:\n  max_concurrent: 0\n", "'subagents.max_concurrent' must be at least 1"),
        ("agent:\n  max_turns: 0\n", "'agent.max_turns' must be at least 1"),
        (
            "summarization:\n  keep: {type: fraction, value: 5}\n",
            "'summarization.keep' is a fraction of the window, so its value must be above 0",
        ),
        (
            "summarization:\n  trigger: [{type: messages, value: -3}]\n",
            "'summarization.trigger[0]' counts messages, so its value must be at least 0",
        ),
    ],
)
def test_a_value_out_of_range_names_the_range(home: Path, text: str, expected: str) -> None:
    assert expected in one_line_error(home, text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # a setting named ...tokens was taken for a secret, so its value was hidden
            "memory:\n  max_injection_tokens: 0\n",
            "'memory.max_injection_tokens' must be at least 1, got 0",
        ),
        ("model:\n  max_output_tokens: lots\n", "'model.max_output_tokens' must be a whole"),
        (
            "summarization:\n  trim_tokens_to_summarize: -2\n",
            "'summarization.trim_tokens_to_summarize' must be at least 1, got -2",
        ),
        (  # an unknown choice was hidden because the choices list 'tokens'
            "summarization:\n  keep: {type: pages, value: 3}\n",
            "'summarization.keep.type' must be one of 'tokens', 'messages' or 'fraction', "
            "got 'pages'",
        ),
        ("- memory\n", "the top level must be a mapping of sections (memory:, model:, ...), got"),
    ],
)
def test_the_bad_value_is_shown(home: Path, text: str, expected: str) -> None:
    """Found by a review: these errors said "a value not shown (it may be a key)", or
    nothing, instead of what was written."""
    message = one_line_error(home, text)
    assert expected in message and "not shown" not in message, message


def test_a_shown_value_is_one_short_line_and_a_keys_value_stays_hidden(home: Path) -> None:
    message = one_line_error(home, "memory:\n  enabled: '" + "x" * 500 + "\\n'\n")
    assert message.endswith("got '" + "x" * 56 + "...")  # repr cut to 60 characters
    message = one_line_error(home, 'memory:\n  eviction: "a\\nb\\x00c"\n')
    assert message.endswith("got 'a\\nb\\x00c'")  # escaped, still one line
    message = one_line_error(home, "model:\n  api_key: [x7Yplainsecret99]\n")
    assert "x7Yplainsecret99" not in message and "a value not shown" in message
    assert "'model.max_output_tokens'" in one_line_error(home, "model:\n  max_output_tokens: 1\n")


def test_a_malformed_embeddings_spec_is_named_when_the_file_is_read(home: Path) -> None:
    message = one_line_error(home, "memory:\n  embeddings: minilm\n")
    assert "'minilm'" in message and "'local:<name or path>'" in message
    write_config(home, "memory:\n  embeddings: 'local:all-MiniLM-L6-v2'\n")
    assert load_settings().memory.embeddings == "local:all-MiniLM-L6-v2"


def test_invalid_yaml_is_one_line(home: Path) -> None:
    message = one_line_error(home, "memory:\n  max_facts: [1, 2\n  enabled: true\n")
    assert "not valid YAML" in message


def test_a_key_given_twice_is_one_line_naming_it_and_its_line(home: Path) -> None:
    """Found by a review: PyYAML kept the second ``memory:`` and dropped the first."""
    two_sections = "memory:\n  max_facts: 10\nmodel:\n  name: m\nmemory:\n  enabled: true\n"
    message = one_line_error(home, two_sections)
    assert message.endswith("config.yaml line 5: `memory` appears twice; merge the two sections")
    message = one_line_error(home, "memory:\n  max_facts: 10\n  max_facts: 20\n")
    assert message.endswith("config.yaml line 3: `max_facts` appears twice; keep one of the two")
    write_config(home, "memory:\n  <<: {max_facts: 7}\n  max_facts: 9\n")  # a merge: no repeat
    assert load_settings().memory.max_facts == 9


@pytest.mark.parametrize("value", ["not a url", "sk-live-0123456789abcdef", "localhost:8080"])
def test_a_base_url_without_a_scheme_is_one_clean_line_that_never_shows_it(
    home: Path, value: str
) -> None:
    """Found by a review: 'not a url' was remembered as a secret, and its pieces redacted
    the message's own words ("'[redacted]' is [redacted]valid URL")."""
    write_config(home, f"model:\n  base_url: {value!r}\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == (
        "model.base_url is not a URL (no http:// or https://): write it as http://HOST:PORT/v1"
    )


def test_a_bad_base_url_hides_its_password(home: Path) -> None:
    write_config(home, "model:\n  base_url: 'http://alice:pa/ss-word@host:80/v1'\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "pa/ss-word" not in str(info.value) and "is not a valid URL" in str(info.value)


def test_empty_file_means_defaults(home: Path) -> None:
    write_config(home, "")
    assert load_settings().memory.max_facts == 100


def test_a_model_named_without_a_key_is_said_not_replaced_by_offline(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEERFLOW_NB_MODEL", "gpt-4o")
    settings = load_settings()
    assert not settings.is_offline and settings.chat_model_name == "gpt-4o"
    with pytest.raises(ModelError, match="model 'gpt-4o' needs an API key: set OPENAI_API_KEY"):
        get_chat_model(settings)
    monkeypatch.setenv("DEERFLOW_NB_MODEL", "offline")
    assert load_settings().is_offline


def test_settings_are_declared_once_and_config_hands_out_the_same_classes() -> None:
    """One declaration (``schema/settings.py``): config's names are those classes."""
    from deerflow_nb import config
    from deerflow_nb.schema import settings as schema

    assert config.Settings is schema.Settings
    assert config.MemoryConfig is schema.MemorySettings
    assert config.SummarizationConfig is schema.SummarizationSettings
    assert config.ContextSize is schema.ContextSizeSettings
    built = config.Settings(home=Path("/nowhere"))
    for name, section in schema.SETTINGS_SECTIONS.items():
        assert getattr(built, name) == section(), name
    assert config.ContextSize("messages", 3) == config.ContextSize(type="messages", value=3)
    with pytest.raises(AttributeError, match="no attribute 'Nonsense'"):
        config.Nonsense  # noqa: B018


def test_assigning_a_setting_is_checked_as_the_file_is(home: Path) -> None:
    from pydantic import ValidationError

    settings = load_settings()
    settings.memory.embeddings = "local:all-MiniLM-L6-v2"
    settings.memory.debounce_seconds = 0
    assert settings.memory.debounce_seconds == 0.0
    with pytest.raises(ValidationError, match="max_facts"):
        settings.memory.max_facts = 0
    with pytest.raises(ValidationError, match="memmory"):
        settings.memmory = None  # a typo is refused, not stored beside the real key
    assert settings.memory.max_facts == 100


def test_settings_bounds_are_field_constraints(home: Path) -> None:
    from deerflow_nb.schema.settings import MemorySettings

    bounds = {m.__class__.__name__ for m in MemorySettings.model_fields["max_facts"].metadata}
    assert "Ge" in bounds
    write_config(home, "memory:\n  fact_confidence_threshold: 1\n  max_facts: 5\n")
    settings = load_settings()
    assert settings.memory.fact_confidence_threshold == 1.0 and settings.memory.max_facts == 5


def test_importing_config_does_not_import_pydantic() -> None:
    """``%load_ext`` imports config; the settings' pydantic models load on first use."""
    import subprocess
    import sys

    probe = (
        "import sys; import deerflow_nb.config as c; before = 'pydantic' in sys.modules; "
        "c.load_settings(); print(before, 'pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "False True", out.stderr


def test_a_config_or_memory_file_of_the_wrong_kind_is_one_line(home: Path) -> None:
    """Found by a review: a UTF-16 config.yaml, or a folder named config.yaml or memory.json,
    gave a traceback from every magic."""
    from deerflow_nb.config import HomeError
    from deerflow_nb.memory import Memory

    config = home / "config.yaml"
    config.write_text("memory:\n  enabled: true\n", encoding="utf-16")
    with pytest.raises(ConfigError, match="is not UTF-8 text; save it as UTF-8"):
        load_settings(home)
    config.unlink()
    config.mkdir()
    with pytest.raises(ConfigError, match="cannot be read .Is a directory.; make it a readable"):
        load_settings(home)
    config.rmdir()
    (home / "memory.json").mkdir()
    with Memory(home) as memory, pytest.raises(HomeError, match="move it aside"):
        memory.facts.list()


def test_another_programs_journal_db_is_left_alone_and_said_in_one_line(home: Path) -> None:
    """Found by a review: a journal.db of another program made every command fail on
    ``table "messages" already exists``."""
    import sqlite3

    from deerflow_nb.config import HomeError
    from deerflow_nb.memory import Memory

    db = sqlite3.connect(home / "journal.db")
    db.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
    db.commit()
    db.close()
    with pytest.raises(HomeError, match="another program's database .tables messages."):
        Memory(home).status()
    db = sqlite3.connect(home / "journal.db")
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    db.close()
    assert names == ["messages"]  # nothing of ours was added to it
    assert mode == "delete"  # nor was its journal mode changed to ours (WAL)


def test_a_newer_versions_journal_is_refused_before_anything_is_written(home: Path) -> None:
    """Found by a review: an older deerflow-nb wrote to a journal a newer one had migrated,
    whose tables it does not know."""
    import sqlite3

    from deerflow_nb.config import HomeError
    from deerflow_nb.memory import Memory

    with Memory(home) as memory:
        memory.add_fact("Prefers polars")
    with sqlite3.connect(home / "journal.db") as db:
        db.execute("INSERT INTO _migrations VALUES ('m999_from_the_future', '2027-01-01')")
        before = db.execute("SELECT COUNT(*) FROM memory_versions").fetchone()[0]
    with pytest.raises(HomeError, match="newer deerflow-nb .* m999_from_the_future.*upgrade"):
        Memory(home).add_fact("Uses duckdb")
    with sqlite3.connect(home / "journal.db") as db:
        assert db.execute("SELECT COUNT(*) FROM memory_versions").fetchone()[0] == before
