"""The zygote's control protocol over a real socketpair (lfm_runner.zygote)."""
import base64
import json
import os
import socket
import subprocess
import sys
import time

RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lfm_runner_main.py")


def start(tmp_path, preload=(), stderr=None):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    config = tmp_path / "zygote.json"
    config.write_text(json.dumps({"control_fd": theirs.fileno(), "preload": list(preload), "sys_path": [str(tmp_path)]}))
    process = subprocess.Popen([sys.executable, RUNNER, "zygote", str(config)], pass_fds=[theirs.fileno()], stderr=stderr)
    theirs.close()
    return process, ours


def message(sock):
    return json.loads(sock.recv(1 << 16))


def started(sock):
    """The `started` message and the descriptors it hands over: the child's done socket, and a
    spare's go pipe."""
    data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 4)
    return json.loads(data), fds


def done_of(fd):
    """What the child says on its done socket once its call has run (None: it died first)."""
    with socket.socket(fileno=os.dup(fd)) as done:
        done.settimeout(30)  # a child that never says anything fails the test, not hangs it
        data = done.recv(1 << 16)
    return json.loads(data) if data else None


def done_of_now(fd):
    """Like done_of, without waiting: None when the child has said nothing yet."""
    try:
        with socket.socket(fileno=os.dup(fd)) as done:
            data = done.recv(1 << 16, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return None
    return json.loads(data) if data else None


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
    return {"op": "call", "id": 7, "request": str(directory / "request.json"), "dir": str(directory)}, request


def test_a_call_is_forked_run_in_its_sandbox_and_reaped(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    body = "import os\ndef f():\n    print('out')\n    return os.getcwd()\n"
    call, _ = call_request(tmp_path, "c1", body)
    sock.send(json.dumps(call).encode())
    info, (done,) = started(sock)
    assert info["op"] == "started" and info["id"] == 7
    # The child says its call is over before it exits: its CPU, outcome and value.
    said = done_of(done)
    assert said["user"] >= 0 and said["system"] >= 0 and said["outcome"]["ok"] is True
    assert json.loads(base64.b64decode(said["result"])) == str(tmp_path / "c1" / "sandbox")
    assert not (tmp_path / "c1" / "result").exists() and not (tmp_path / "c1" / "outcome.json").exists()
    assert (tmp_path / "c1" / "stdout").read_text() == "out\n"
    # It waits for lfm to close its end before it exits.
    time.sleep(0.1)
    assert open(f"/proc/{info['pid']}/stat").read().split()[2] != "Z"
    os.close(done)
    exited = message(sock)
    assert exited["op"] == "exited" and exited["pid"] == info["pid"] and exited["status"] == 0
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_each_call_draws_its_own_random_numbers(tmp_path):
    # Loaded in the zygote: each child starts from a copy of its generator's state.
    process, sock = start(tmp_path, preload=("random",))
    assert message(sock)["op"] == "ready"
    drawn = []
    for name in ("r1", "r2", "r3"):
        call, _ = call_request(tmp_path, name, "import random\ndef f():\n    return random.random()\n")
        sock.send(json.dumps(call).encode())
        _, (done,) = started(sock)
        drawn.append(json.loads(base64.b64decode(done_of(done)["result"])))
        os.close(done)
        assert message(sock)["status"] == 0
    assert len(set(drawn)) == 3, drawn
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_value_too_large_for_the_done_message_goes_to_the_files_first(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    call, _ = call_request(tmp_path, "big", "def f():\n    return 'x' * 100000\n")
    sock.send(json.dumps(call).encode())
    _, (done,) = started(sock)
    said = done_of(done)
    assert "outcome" not in said and "result" not in said and said["user"] >= 0
    assert json.loads((tmp_path / "big" / "result").read_text()) == "x" * 100000
    assert json.loads((tmp_path / "big" / "outcome.json").read_text())["ok"] is True
    os.close(done)
    assert message(sock)["status"] == 0
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_call_that_dies_says_nothing_before_its_exit(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    body = "import os, signal\ndef f():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    call, _ = call_request(tmp_path, "k1", body)
    sock.send(json.dumps(call).encode())
    _, (done,) = started(sock)
    assert done_of(done) is None
    os.close(done)
    exited = message(sock)
    assert exited["op"] == "exited" and os.WTERMSIG(exited["status"]) == 9
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_child_that_cannot_join_its_cgroup_never_runs_user_code(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    read_only = os.open(os.devnull, os.O_RDONLY)
    call, _ = call_request(tmp_path, "c2", "def f():\n    open('ran', 'w')\n")
    socket.send_fds(sock, [json.dumps(call).encode()], [read_only])
    os.close(read_only)
    _, (done,) = started(sock)
    assert done_of(done) is None  # the call never ran
    os.close(done)
    exited = message(sock)
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


def spare_of(sock, tmp_path, id_, name, body):
    """A spare for a call of `body`: (started message, done fd, go fd, the call's request)."""
    call, request = call_request(tmp_path, name, body)
    sock.send(json.dumps({"op": "spare", "id": id_, "dir": call["dir"], "rlimits": []}).encode())
    info, (done, go) = started(sock)
    assert info["op"] == "started" and info["id"] == id_
    return info, done, go, request


def test_a_spare_does_its_setup_first_and_runs_the_request_it_is_handed(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    info, done, go, request = spare_of(sock, tmp_path, 8, "s1", "import os\ndef f():\n    import json\n    return os.getcwd()\n")
    # The spare opens its import log before its request comes; the call's imports go to it.
    log = tmp_path / "s1" / "imports.log"
    request["import_log"] = str(log)
    # It sets itself up (into its sandbox) and waits: nothing runs before its request.
    sandbox = str(tmp_path / "s1" / "sandbox")
    for _ in range(200):
        if os.readlink(f"/proc/{info['pid']}/cwd") == sandbox:
            break
        time.sleep(0.01)
    assert os.readlink(f"/proc/{info['pid']}/cwd") == sandbox
    time.sleep(0.1)
    assert done_of_now(done) is None
    os.write(go, json.dumps({"request": request}).encode())
    os.close(go)
    said = done_of(done)
    assert json.loads(base64.b64decode(said["result"])) == sandbox
    assert "json" in [line.split("\t")[0] for line in log.read_text().splitlines()]
    os.close(done)
    exited = message(sock)
    assert exited["op"] == "exited" and exited["id"] == 8 and exited["status"] == 0
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_request_too_large_for_the_pipe_comes_as_a_path(tmp_path):
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    _, done, go, request = spare_of(sock, tmp_path, 9, "s2", "def f(text):\n    return len(text)\n")
    request["args"] = {"json": [["y" * 200000], {}]}
    path = tmp_path / "s2" / "request.json"
    path.write_text(json.dumps(request))
    os.write(go, json.dumps({"request_path": str(path)}).encode())
    os.close(go)
    said = done_of(done)
    assert json.loads(base64.b64decode(said["result"])) == 200000
    os.close(done)
    assert message(sock)["status"] == 0
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0


def test_a_spare_leaves_without_running_when_its_go_pipe_closes_unwritten(tmp_path):
    """lfm sends a spare away by closing its pipe; it closes them all when the zygote dies."""
    process, sock = start(tmp_path)
    assert message(sock)["op"] == "ready"
    body = "def f():\n    open('ran', 'w')\n"
    _, done1, go1, _ = spare_of(sock, tmp_path, 1, "d1", body)
    info2, done2, go2, _ = spare_of(sock, tmp_path, 2, "d2", body)
    os.close(go1)  # lfm sends a spare away by closing its go pipe unwritten
    exited = message(sock)
    assert exited["op"] == "exited" and exited["id"] == 1 and exited["status"] == 0
    assert done_of(done1) is None
    process.kill()
    process.wait(10)
    os.close(go2)  # the zygote is dead: the pipe lfm holds is all the spare waits on
    assert done_of(done2) is None
    for _ in range(100):  # the second spare is not the test's child: poll until it is gone
        if not os.path.exists(f"/proc/{info2['pid']}") or open(f"/proc/{info2['pid']}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the spare outlived its go pipe")
    assert not (tmp_path / "d1" / "sandbox" / "ran").exists()
    assert not (tmp_path / "d2" / "sandbox" / "ran").exists()


def test_a_spare_whose_directory_is_gone_leaves_without_a_word(tmp_path):
    """The serve drops a spare's directory when it ends; a spare still getting ready then
    cannot open its output files, and that is no error of anyone's."""
    process, sock = start(tmp_path, stderr=subprocess.PIPE)
    assert message(sock)["op"] == "ready"
    gone = tmp_path / "gone"
    sock.send(json.dumps({"op": "spare", "id": 3, "dir": str(gone), "rlimits": []}).encode())
    info, (done, go) = started(sock)
    exited = message(sock)
    assert exited["op"] == "exited" and exited["pid"] == info["pid"] and exited["status"] != 0
    assert done_of(done) is None
    os.close(go)
    sock.send(b'{"op": "exit"}')
    assert process.wait(10) == 0
    assert b"lfm zygote child" not in process.stderr.read()


def test_the_zygote_learns_installed_and_stdlib_modules_never_the_users(tmp_path, monkeypatch):
    import colorsys as loaded_once

    from lfm_runner import zygote

    user_module = tmp_path / "mine.py"
    user_module.write_text("raise SystemExit('user code ran in the zygote')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "colorsys")
    prefixes = zygote.installed_dirs()
    assert zygote.learnable("colorsys", loaded_once.__file__, prefixes)
    assert not zygote.learnable("mine", str(user_module), prefixes)
    assert not zygote.learnable("nowhere_loaded.child", loaded_once.__file__, prefixes)
    answer = zygote.learn([["mine", str(user_module)], ["colorsys", loaded_once.__file__],
                           ["json", None]])
    assert "colorsys" in sys.modules and "mine" not in sys.modules
    assert answer["op"] == "learned" and answer["skipped"] == 1 and answer["failed"] == 0
    assert "colorsys" in answer["packages"] and answer["imported"] >= 1
    assert "colorsys" not in answer["installed"]  # the standard library's
    assert answer["rss"] > 0
