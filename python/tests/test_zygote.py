"""The zygote's control protocol over a real socketpair (lfm_runner.zygote)."""
import json
import os
import socket
import subprocess
import sys

RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lfm_runner_main.py")


def start(tmp_path, preload=()):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    config = tmp_path / "zygote.json"
    config.write_text(json.dumps({"control_fd": theirs.fileno(), "preload": list(preload), "sys_path": [str(tmp_path)]}))
    process = subprocess.Popen([sys.executable, RUNNER, "zygote", str(config)], pass_fds=[theirs.fileno()])
    theirs.close()
    return process, ours


def message(sock):
    return json.loads(sock.recv(1 << 16))


def call_request(tmp_path, name, body):
    (tmp_path / "work.py").write_text(body)
    directory = tmp_path / name
    (directory / "sandbox").mkdir(parents=True)
    request = {
        "target": {"mode": "import", "module": "work", "root": str(tmp_path), "qualname": "f"},
        "args": {"json": [[], {}]},
        "result_file": str(directory / "result"),
        "outcome_file": str(directory / "outcome.json"),
    }
    (directory / "request.json").write_text(json.dumps(request))
    return {"op": "call", "id": 7, "request": str(directory / "request.json"), "dir": str(directory)}


def test_a_call_is_forked_run_in_its_sandbox_and_reaped(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    body = "import os\ndef f():\n    print('out')\n    return os.getcwd()\n"
    sock.send(json.dumps(call_request(tmp_path, "c1", body)).encode())
    started = message(sock)
    assert started["op"] == "started" and started["id"] == 7
    exited = message(sock)
    assert exited["op"] == "exited" and exited["pid"] == started["pid"] and exited["status"] == 0
    assert json.loads((tmp_path / "c1" / "result").read_text()) == str(tmp_path / "c1" / "sandbox")
    assert (tmp_path / "c1" / "stdout").read_text() == "out\n"
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_child_that_cannot_join_its_cgroup_never_runs_user_code(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    read_only = os.open(os.devnull, os.O_RDONLY)
    request = call_request(tmp_path, "c2", "def f():\n    open('ran', 'w')\n")
    socket.send_fds(sock, [json.dumps(request).encode()], [read_only])
    os.close(read_only)
    assert message(sock)["op"] == "started"
    exited = message(sock)
    assert os.WEXITSTATUS(exited["status"]) == 97
    assert not (tmp_path / "c2" / "sandbox" / "ran").exists()
    sock.close()
    assert process.wait(10) == 0


def test_a_failing_preload_is_reported(tmp_path):
    process, sock = start(tmp_path, preload=["no_such_module_here"])
    failed = message(sock)
    assert failed["op"] == "failed"
    assert "no_such_module_here" in failed["error"]["message"]
    assert process.wait(10) == 1
