"""The submit side of test_ship_layouts.py, run by the layout venv's python (whose every
distribution lies outside that venv): drives Parsl HTEX or Dask with workers on bare nodes
(nodes.py) through the layout's job, and prints one JSON line: each call's result, and the
pack that carried the job (its hash and parts) as the workers were offered it.

    python submit_layout.py parsl|dask CLUSTER_JSON CALLS
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nodes  # noqa: E402

NODES = 2


def through_parsl(cluster, calls):
    import parsl
    from parsl.config import Config

    import layout_job

    config = Config(executors=[nodes.parsl_executor(cluster, blocks=NODES, workers_per_node=1)],
                    run_dir=os.path.join(cluster["run"], "runinfo"), strategy="none")
    with parsl.load(config):
        app = parsl.python_app(layout_job.compute, executors=["nodes"])
        futures = [app(n) for n in range(calls)]
        results = [future.result(timeout=600) for future in futures]
    parsl.clear()
    return results


def through_dask(cluster, calls):
    from distributed import Client, LocalCluster

    import layout_job
    from lfm.dask import shipped

    with LocalCluster(n_workers=0, host="127.0.0.1", scheduler_port=0, dashboard_address=None,
                      processes=False, protocol="tcp://") as local, Client(local) as client:
        with nodes.dask_workers(cluster, local.scheduler_address, nodes=NODES, workers_per_node=1):
            client.wait_for_workers(NODES, timeout=120)
            task = shipped(layout_job.compute)
            futures = [client.submit(task, n, pure=False) for n in range(calls)]
            return client.gather(futures)


def offered_pack():
    """The job's pack as offered to workers (built once: the engines' calls reused it)."""
    import layout_job
    from lfm import pack_transport

    ref = pack_transport.offer(layout_job.compute)
    return {"hash": ref.hash, "parts": ref.parts or [],
            "submit_files": [sys.modules[name].__file__
                             for name in ("layout_outside", "layout_job", "layout_shared")]}


def main(engine, cluster_json, calls):
    cluster = json.loads(cluster_json)
    run = {"parsl": through_parsl, "dask": through_dask}[engine]
    results = [list(result) for result in run(cluster, int(calls))]
    print(json.dumps({"results": results, "pack": offered_pack()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
