"""Model providers registered at the edge (``llm.registry``): the offline model through its
entry point, a third party's package through the ``deerflow_nb.providers`` group, and a
broken one reported without taking the others down.

The third party is a real distribution on ``sys.path`` (its ``.dist-info`` with
``entry_points.txt``), found by ``importlib.metadata`` in a fresh process as pip would
leave it installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deerflow_nb.config import Settings
from deerflow_nb.llm import ModelError, get_chat_model, providers
from deerflow_nb.llm.registry import GROUP
from deerflow_nb.memory import Memory
from deerflow_nb.notebook.views.status import StatusView

ROOT = Path(__file__).resolve().parents[1]

ECHO = """
from deerflow_nb.llm import ChatModel, ChatResult, Provider


class Echo(ChatModel):
    def __init__(self, name):
        self.name = name

    def chat(self, messages, *, tools=None, json_mode=False, on_text=None):
        return ChatResult(content="echo: " + messages[-1]["content"], model=self.name)


PROVIDER = Provider(
    "echo",
    "says the last message back",
    serves=lambda name, settings: name.startswith("echo/"),
    create=lambda settings, name: Echo(name),
)


def _cannot_tell(name, settings):
    raise RuntimeError("cannot read my model list")


RAISING = Provider("raising", "its serves() raises", serves=_cannot_tell, create=PROVIDER.create)
"""


def install(site: Path, entry_points: str) -> None:
    """A distribution ``echo-provider`` in ``site``, as pip would install it."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "echo_provider.py").write_text(ECHO)
    info = site / "echo_provider-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-provider\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{entry_points}\n")


def run(site: Path, home: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    env["DEERFLOW_NB_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_the_offline_model_comes_from_its_entry_point(home: Path) -> None:
    names = [(p.name, p.origin) for p in providers()]
    assert names[0] == ("offline", "built-in") and names[-1] == ("openai", "built-in")
    assert get_chat_model(Settings(home=home)).name == "offline"
    with pytest.raises(ModelError, match="needs an API key"):
        get_chat_model(Settings(home=home), "gpt-4o")
    with Memory(home) as mem:  # %memory status lists them
        rows = [line.split() for line in repr(StatusView(mem.status())).splitlines()]
        assert ["model", "providers", "offline,", "openai"] in rows


def test_a_third_party_provider_serves_its_names_and_is_listed(tmp_path: Path) -> None:
    site, home = tmp_path / "site", tmp_path / "home"
    install(site, "echo = echo_provider:PROVIDER")
    code = (
        "import json\n"
        "from deerflow_nb.config import load_settings\n"
        "from deerflow_nb.llm import get_chat_model\n"
        "from deerflow_nb.memory import open_reader\n"
        "model = get_chat_model(load_settings(), 'echo/small')\n"
        "reply = model.chat([{'role': 'user', 'content': 'hello'}]).content\n"
        "with open_reader() as reader:\n"
        "    listed = reader.status()['model_providers']\n"
        "print(json.dumps({'reply': reply, 'listed': listed}))\n"
    )
    result = run(site, home, code)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["reply"] == "echo: hello"
    assert seen["listed"] == ["offline", "echo (echo_provider:PROVIDER)", "openai"]
    doctor = run(site, home, "from deerflow_nb.cli import main; main(['doctor'])")
    assert doctor.returncode == 0, doctor.stderr
    listed = doctor.stdout.split("Model providers:")[1]
    assert "echo (echo_provider:PROVIDER): says the last message back" in listed
    assert "offline: the embedded offline model" in listed


def test_a_broken_provider_is_reported_and_the_others_still_work(tmp_path: Path) -> None:
    site, home = tmp_path / "site", tmp_path / "home"
    install(site, "broken = echo_provider:NO_SUCH_NAME")
    code = (
        "from deerflow_nb.config import load_settings\n"
        "from deerflow_nb.llm import get_chat_model\n"
        "from deerflow_nb.llm.registry import described\n"
        "print(get_chat_model(load_settings()).name)\n"
        "print(described()[-1])\n"
    )
    result = run(site, home, code)
    assert result.returncode == 0, result.stderr
    name, line = result.stdout.splitlines()
    assert name == "offline"
    assert line.startswith("broken: not loaded (AttributeError")


def test_a_provider_whose_serves_raises_is_said_once_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopback import start_server

    site, home = tmp_path / "site", tmp_path / "home"
    install(site, "raising = echo_provider:RAISING")
    code = (
        "from deerflow_nb import Agent\n"
        "from deerflow_nb.llm.registry import described\n"
        "for turn in range(3):\n"
        "    agent = Agent()\n"
        "    print(agent.run(f'hello {turn}', thread='t')[:5])\n"
        "    agent.close()\n"
        "print(described()[-1])\n"
    )
    with start_server(models=("m",)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("DEERFLOW_NB_MODEL", "m")
        result = run(site, home, code)
        doctor = run(site, home, "from deerflow_nb.cli import main; main(['doctor'])")
    assert result.returncode == 0, result.stderr
    *replies, line = result.stdout.splitlines()
    assert len(replies) == 3 and all(replies)  # every turn answered, by the openai client
    said = [w for w in result.stderr.splitlines() if "raising" in w]
    assert len(said) == 1 and "skipped" in said[0] and "Traceback" not in result.stderr
    assert line == "raising: skipped (serves() raised RuntimeError: cannot read my model list)"
    assert doctor.returncode == 0 and line in doctor.stdout
