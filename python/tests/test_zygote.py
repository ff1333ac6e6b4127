"""The zygote's control protocol over a real socketpair (lfm_runner.zygote)."""
import json
import os
import socket
import subprocess
import sys
import time

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
    # "done" comes before the exit, and by then the call's files are complete.
    done = message(sock)
    assert done["op"] == "done" and done["id"] == 7 and done["pid"] == started["pid"]
    assert done["user"] >= 0 and done["system"] >= 0
    assert json.loads((tmp_path / "c1" / "result").read_text()) == str(tmp_path / "c1" / "sandbox")
    assert (tmp_path / "c1" / "stdout").read_text() == "out\n"
    exited = message(sock)
    assert exited["op"] == "exited" and exited["pid"] == started["pid"] and exited["status"] == 0
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_call_that_dies_says_nothing_before_its_exit(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    body = "import os, signal\ndef f():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    sock.send(json.dumps(call_request(tmp_path, "k1", body)).encode())
    assert message(sock)["op"] == "started"
    exited = message(sock)
    assert exited["op"] == "exited" and os.WTERMSIG(exited["status"]) == 9
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
    exited = message(sock)  # no "done": the call never ran
    assert exited["op"] == "exited" and os.WEXITSTATUS(exited["status"]) == 97
    assert not (tmp_path / "c2" / "sandbox" / "ran").exists()
    sock.close()
    assert process.wait(10) == 0


def test_a_failing_preload_is_reported(tmp_path):
    process, sock = start(tmp_path, preload=["no_such_module_here"])
    failed = message(sock)
    assert failed["op"] == "failed"
    assert "no_such_module_here" in failed["error"]["message"]
    assert process.wait(10) == 1


def test_a_spare_does_its_setup_first_and_runs_the_request_it_is_handed(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    body = "import os\ndef f():\n    return os.getcwd()\n"
    request = call_request(tmp_path, "s1", body)
    spare = {"op": "spare", "id": 8, "dir": request["dir"], "rlimits": []}
    sock.send(json.dumps(spare).encode())
    started = message(sock)
    assert started["op"] == "started" and started["id"] == 8
    # It sets itself up (into its sandbox) and waits: nothing runs before "go".
    sandbox = str(tmp_path / "s1" / "sandbox")
    for _ in range(200):
        if os.readlink(f"/proc/{started['pid']}/cwd") == sandbox:
            break
        time.sleep(0.01)
    assert os.readlink(f"/proc/{started['pid']}/cwd") == sandbox
    time.sleep(0.1)
    assert not (tmp_path / "s1" / "result").exists()
    sock.send(json.dumps({"op": "go", "id": 8, "request": request["request"]}).encode())
    assert message(sock)["op"] == "done"
    exited = message(sock)
    assert exited["op"] == "exited" and exited["id"] == 8 and exited["status"] == 0
    assert json.loads((tmp_path / "s1" / "result").read_text()) == str(tmp_path / "s1" / "sandbox")
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_dropped_spare_and_the_spare_of_a_dead_zygote_leave_without_running(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    body = "def f():\n    open('ran', 'w')\n"
    pids = []
    for id_, name in ((1, "d1"), (2, "d2")):
        request = call_request(tmp_path, name, body)
        sock.send(json.dumps({"op": "spare", "id": id_, "dir": request["dir"]}).encode())
        pids.append(message(sock)["pid"])
    sock.send(b'{"op": "drop", "id": 1}')
    exited = message(sock)  # a dropped spare ran nothing: no "done"
    assert exited["op"] == "exited" and exited["id"] == 1 and exited["status"] == 0
    process.kill()
    process.wait(10)
    for _ in range(100):  # the second spare is not the test's child: poll until it is gone
        if not os.path.exists(f"/proc/{pids[1]}") or open(f"/proc/{pids[1]}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the spare outlived its zygote")
    assert not (tmp_path / "d1" / "sandbox" / "ran").exists()
    assert not (tmp_path / "d2" / "sandbox" / "ran").exists()
