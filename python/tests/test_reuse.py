"""Reused call processes (lfm_runner.reuse): a zygote's child that runs the next calls of its
function, over a real zygote and its sockets."""
import base64
import json
import os
import socket

from test_zygote import call_request, done_of, message, start, started

WORK = """import os
STATE = []

def f(megabytes=0):
    block = bytearray(megabytes << 20)
    for at in range(0, len(block), 4096):
        block[at] = 1
    STATE.append(megabytes)
    print('call', len(STATE))
    return [os.getpid(), list(STATE), os.getcwd()]
"""


def next_call(tmp_path, name, megabytes, reuse=True):
    """The message lfm writes on a reused child's done socket for its next call."""
    directory = tmp_path / name
    (directory / "sandbox").mkdir(parents=True)
    request = {
        "target": {"mode": "import", "module": "work", "root": str(tmp_path), "qualname": "f"},
        "args": {"json": [[megabytes], {}]},
        "result_file": str(directory / "result"),
        "outcome_file": str(directory / "outcome.json"),
        "reuse": reuse,
    }
    return {"dir": str(directory), "request": request}


def first_call(tmp_path, sock, megabytes=0, reuse=True):
    call, request = call_request(tmp_path, "c1", WORK)
    request["args"] = {"json": [[megabytes], {}]}
    request["reuse"] = reuse
    with open(call["request"], "w") as handle:
        json.dump(request, handle)
    sock.send(json.dumps(call).encode())
    info, (done,) = started(sock)
    return info, done


def value(said):
    return json.loads(base64.b64decode(said["result"]))


def test_a_reused_child_runs_the_next_call_in_the_same_process_with_its_globals(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    info, done = first_call(tmp_path, sock)
    said = done_of(done)
    assert said["reuse"] is True and said["calls"] == 1
    pid, state, _ = value(said)
    assert pid == info["pid"] and state == [0]
    os.write(done, json.dumps(next_call(tmp_path, "c2", 0)).encode())
    said = done_of(done)
    pid, state, cwd = value(said)
    # Same process, the first call's global still there; the second call's own directory.
    assert pid == info["pid"] and state == [0, 0] and said["calls"] == 2
    assert cwd == str(tmp_path / "c2" / "sandbox")
    assert (tmp_path / "c2" / "stdout").read_text() == "call 2\n"
    assert (tmp_path / "c1" / "stdout").read_text() == "call 1\n"
    # Closing lfm's end ends the process.
    os.close(done)
    exited = message(sock)
    assert exited["op"] == "exited" and exited["pid"] == info["pid"] and exited["status"] == 0
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_each_reused_call_measures_its_own_memory_peak(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    _, done = first_call(tmp_path, sock, megabytes=300)
    first = done_of(done)
    assert first["outcome"]["memory_growth"] > 250 << 20
    os.write(done, json.dumps(next_call(tmp_path, "c2", 10)).encode())
    second = done_of(done)
    # The high-water mark was reset before the second call: 10 MiB, not the first's 300.
    assert (8 << 20) < second["outcome"]["memory_growth"] < (100 << 20)
    # CPU goes as the process's total: it only grows (lfm counts the difference).
    assert second["user"] + second["system"] >= first["user"] + first["system"]
    os.close(done)
    assert message(sock)["op"] == "exited"
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_call_without_reuse_waits_for_its_end_and_takes_no_next_call(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    info, done = first_call(tmp_path, sock, reuse=False)
    said = done_of(done)
    assert "reuse" not in said
    # What lfm writes now is not read as a call: the child exits on it.
    os.write(done, json.dumps(next_call(tmp_path, "c2", 0)).encode())
    exited = message(sock)
    assert exited["op"] == "exited" and exited["pid"] == info["pid"]
    assert not (tmp_path / "c2" / "stdout").exists()
    os.close(done)
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_io_of_a_reused_call_is_counted_from_its_start():
    from lfm_runner import reuse

    assert reuse.io_difference([100, 50], [130, 50]) == [30, 0]
    assert reuse.io_difference(None, [1, 2]) == [1, 2]


def test_a_done_socket_closed_by_lfm_ends_the_loop():
    from lfm_runner import reuse

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.close()
    assert reuse.next_call(theirs) is None
    theirs.close()


def test_the_client_sends_reuse_only_when_asked_and_refuses_what_is_not_a_bool():
    import pytest

    from lfm import calls

    import client_functions

    fields = calls.call_fields(client_functions.double, (1,), {}, calls.Options(reuse=True))
    assert fields["reuse"] is True
    assert "reuse" not in calls.call_fields(client_functions.double, (1,), {}, calls.Options())
    with pytest.raises(TypeError, match="reuse"):
        calls.Options(reuse="yes")
    # An executor's reuse holds for an @lfm.task function that did not say.
    assert calls.Options(reuse=True).merged(memory="1G").reuse is True


def test_task_and_executor_take_the_reuse_option():
    import lfm

    @lfm.task(reuse=True)
    def kept():
        return 1

    assert kept.lfm_options.reuse is True
    with lfm.Executor(max_workers=1, reuse=True) as executor:
        assert executor.options.reuse is True


def test_parsl_and_dask_take_the_reuse_option():
    import pytest

    pytest.importorskip("parsl")
    pytest.importorskip("distributed")
    from lfm import dask as lfm_dask
    from lfm import parsl as lfm_parsl

    import client_functions

    assert lfm_parsl.options_from_spec(client_functions.double, {"reuse": True}).reuse is True
    assert lfm_parsl.options_from_spec(client_functions.double, {}).reuse is False
    assert lfm_dask.LfmPlugin(reuse=True).reuse is True
    with pytest.raises(TypeError, match="reuse"):
        lfm_dask.LfmPlugin(reuse=1)
