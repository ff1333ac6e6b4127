"""`lfm verify`'s probe: run as `python -I -S -c` with one JSON argument {"paths": [...],
"modules": [...]}, it puts the paths first on sys.path, imports every module and prints one
JSON list of [module, error or null] (packer/src/verify.rs reads it).
"""
import importlib, json, sys
request = json.loads(sys.argv[1])
sys.path[:0] = request["paths"]
results = []
for name in request["modules"]:
    try:
        importlib.import_module(name)
        results.append([name, None])
    except BaseException as error:
        results.append([name, "%s: %s" % (type(error).__name__, error)])
print(json.dumps(results))
