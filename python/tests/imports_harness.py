"""Run tests/fixtures/imports/forms.py:observe in a fresh interpreter, as plain python or under
one of the runner's paths, and print what it observed as JSON (python/tests/test_imports.py).

    python imports_harness.py plain|log|call FIXTURES_DIR [IMPORT_LOG]

`plain`: no lfm at all. `log`: the import log started first (lfm_runner.imports.start). `call`:
the runner's call path (lfm_runner.call.run, as `lfm call --import-module` runs it), import log
on. The fixtures' site-packages is added as a site directory first (its .pth files run, as at
start-up); in `log` and `call` json is imported before the log starts, as the runner does.
"""
import os
import site
import sys
import tempfile


def main(mode, fixtures, log_path=None):
    site.addsitedir(os.path.join(fixtures, "site-packages"))
    if mode == "plain":
        sys.path.insert(0, fixtures)
        import json

        import forms

        return json.dumps(forms.observe(), sort_keys=True)
    import json

    from lfm_runner import call, imports

    if mode == "log":
        sys.path.insert(0, fixtures)
        log = imports.start(log_path)
        import forms

        observed = forms.observe()
        log.stop()
        return json.dumps(observed, sort_keys=True)
    work = tempfile.mkdtemp(prefix="lfm-imports-harness-")
    request = {
        "target": {"mode": "import", "module": "forms", "root": fixtures, "qualname": "observe"},
        "result": {"format": "json"},
        "result_file": os.path.join(work, "result"),
        "outcome_file": os.path.join(work, "outcome.json"),
        "import_log": log_path,
    }
    outcome = call.run(request)
    if not outcome["ok"]:
        return json.dumps({"failed": outcome["exception"]})
    with open(request["result_file"]) as handle:
        return json.dumps(json.load(handle), sort_keys=True)


if __name__ == "__main__":
    print(main(*sys.argv[1:]))
