"""The browser harness's reading of a server log: a client gone is not a failure, anything
else is (the chat panel test's teardown relies on it)."""

from jupyterlab_harness import server_failures

CLIENT_GONE_LOG = """[I 19:53:16 ServerApp] Shut down
Traceback (most recent call last):
  File "tornado/iostream.py", line 1, in write
    raise StreamClosedError()
tornado.iostream.StreamClosedError: Stream is closed

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "tornado/websocket.py", line 1142, in wrapper
    raise WebSocketClosedError()
tornado.websocket.WebSocketClosedError
[C 19:53:16 ServerApp] received signal 15, stopping
"""

TURN_FAILED_LOG = (
    CLIENT_GONE_LOG
    + """Traceback (most recent call last):
  File "deerflow_nb/persona.py", line 9, in process_message
    reply = agent.run(message)
ValueError: the turn failed
"""
)


def test_a_client_gone_is_not_a_failure() -> None:
    assert server_failures(CLIENT_GONE_LOG) == []


def test_any_other_traceback_is_a_failure_named_by_its_exception() -> None:
    assert server_failures(TURN_FAILED_LOG) == ["ValueError: the turn failed"]
    assert server_failures("Traceback (most recent call last):\n  File x\n") == [
        "(traceback cut off)"
    ]
