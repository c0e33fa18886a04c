"""The stand-in gateway itself: nothing of it may outlive `stop()` and print during a later
test (a held answer once woke 30 s later, wrote to a socket its client had closed, and
socketserver's traceback landed in another test's captured stderr)."""
import json
import socket
import threading
import time

from tests.agents_trace.replay.fake_gateway import start_fake_gateway


def _handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "process_request_thread" in t.name]


def test_stop_lets_a_held_answer_go_at_once_and_it_prints_nothing(capsys):
    before = set(_handler_threads())
    gateway = start_fake_gateway(hold_s=30.0)
    body = json.dumps({"model": "m"}).encode()
    client = socket.create_connection(gateway.server.server_address)
    client.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 10
    while not gateway.bodies:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    client.close()          # the client leaves while its answer is held
    gateway.stop()
    deadline = time.monotonic() + 5
    while set(_handler_threads()) - before:
        assert time.monotonic() < deadline, "the held answer outlived stop()"
        time.sleep(0.02)
    assert capsys.readouterr().err == ""


def test_an_answer_to_a_client_that_left_is_dropped_without_a_traceback(capsys):
    gateway = start_fake_gateway(hold_s=0.3)
    try:
        body = json.dumps({"model": "m"}).encode()
        client = socket.create_connection(gateway.server.server_address)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        client.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 10
        while not gateway.bodies:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        client.close()      # a reset: the held answer's write fails
        time.sleep(0.8)
    finally:
        gateway.stop()
    assert capsys.readouterr().err == ""
