"""Driver of bench/torch_import.sh: real torch under plain python, `lfm call` and `lfm serve`
(first and warm call), and the import log's cost on `import torch` (issue 53).

Environment: LFM (the lfm binary), PY (the torch venv's interpreter), N (turns).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LFM, PY, N = os.environ["LFM"], os.environ["PY"], int(os.environ.get("N", "10"))
BENCH = os.path.dirname(os.path.abspath(__file__))
SCRATCH = tempfile.mkdtemp(prefix="lfm-torch-bench-")


def plain(function):
    code = f"import json, torch_fns; print(json.dumps(torch_fns.{function}()))"
    done = subprocess.run([PY, "-c", code], cwd=BENCH, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def lfm_call(function, *extra):
    command = [LFM, "call", "--quiet", "--history", os.path.join(SCRATCH, "history.sqlite"),
               "--python", PY, "--cache-dir", os.path.join(SCRATCH, "cache"), *extra,
               f"torch_fns.py:{function}"]
    done = subprocess.run(command, cwd=BENCH, capture_output=True, text=True)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout)


def lfm_serve_twice(function):
    """The first call of one serve, and a warm call once its zygote has learned torch."""
    serve = subprocess.Popen(
        [LFM, "serve", "--backend", "rlimit", "--no-history", "--slots", "1", "--python", PY,
         "--cache-dir", os.path.join(SCRATCH, "serve-cache")],
        cwd=BENCH, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(request):
        serve.stdin.write(json.dumps(request) + "\n")
        serve.stdin.flush()
        return json.loads(serve.stdout.readline())

    replies = []
    for request_id in ("first", "warm"):
        reply = ask({"id": request_id, "function": f"torch_fns.py:{function}"})
        replies.append(reply["result"] if reply["ok"] else {"failed": reply["error"]})
        for _ in range(600):  # the zygote learns between calls
            status = ask({"id": "status", "status": True})["status"]
            if "torch" in ((status.get("zygote") or {}).get("learned") or []):
                break
            time.sleep(0.1)
    serve.stdin.close()
    serve.wait()
    return replies


def results():
    expected = plain("train_step")
    print(f"torch {expected['torch']}, seeded training step (3 SGD steps of a 8-16-2 MLP):")
    print(f"  plain python: losses {expected['losses']}")
    paths = {"lfm call": lfm_call("train_step")}
    paths["lfm serve, first call"], paths["lfm serve, warm call"] = lfm_serve_twice("train_step")
    for path, got in paths.items():
        verdict = "identical" if got == expected else f"DIFFERENT: {json.dumps(got)[:300]}"
        print(f"  {path}: {verdict}")


def wall(function):
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def import_cost():
    """`import torch` as the function times it, and the whole process's wall, N turns of the
    three back to back (the machine's drift moves all three alike)."""
    runs = {"plain python": [], "lfm call, import log": [], "lfm call, no import log": []}
    for _ in range(N):
        runs["plain python"].append(wall(lambda: plain("timed_import")))
        runs["lfm call, import log"].append(wall(lambda: lfm_call("timed_import")))
        runs["lfm call, no import log"].append(wall(lambda: lfm_call("timed_import", "--no-import-log")))
    print(f"`import torch`, median of {N} turns (seconds; process wall / the import itself):")
    for name, pairs in runs.items():
        print(f"  {name}: {statistics.median(w for w, _ in pairs):.3f} / "
              f"{statistics.median(v for _, v in pairs):.3f}")
    with_log, without = runs["lfm call, import log"], runs["lfm call, no import log"]
    paired = statistics.median(a[1] - b[1] for a, b in zip(with_log, without))
    base = statistics.median(b[1] for b in without)
    print(f"  the import log's cost on the import: median of the paired differences "
          f"{paired * 1e3:+.1f} ms = {100 * paired / base:+.1f}% (goal <= 5%)")
    versus_plain = statistics.median(a[1] - p[1] for a, p in zip(with_log, runs["plain python"]))
    print(f"  lfm call with the import log against plain python: {versus_plain * 1e3:+.1f} ms = "
          f"{100 * versus_plain / statistics.median(p[1] for p in runs['plain python']):+.1f}%")


if __name__ == "__main__":
    results()
    import_cost()
    sys.exit(0)
