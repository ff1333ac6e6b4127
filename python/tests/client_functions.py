"""Functions the client tests send by name (this module is importable where the serve runs)."""

import os
import threading
import time


def double(x):
    return 2 * x


def allocate(mib):
    data = bytearray(b"\x01") * (mib << 20)
    return len(data)


def raise_key_error(key):
    raise KeyError(key)


class Unpicklable(Exception):
    def __init__(self, a, b):  # pickles as Unpicklable(message): a TypeError when unpickled
        super().__init__(f"{a}/{b}")


def raise_unpicklable():
    raise Unpicklable(1, 2)


def return_lock():
    return threading.Lock()


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def parent_pid():
    """The zygote's pid: the same for calls of one serve."""
    return os.getppid()


def segfault():
    import ctypes

    ctypes.string_at(0)


def overlap(directory):
    """How many calls run at once: each leaves a marker while it runs."""
    marker = os.path.join(directory, f"running-{os.getpid()}")
    open(marker, "w").close()
    time.sleep(0.3)
    seen = len([n for n in os.listdir(directory) if n.startswith("running-")])
    os.unlink(marker)
    return seen


def module_file():
    """Where this module was loaded from: the tests directory, or a pack's copy."""
    return os.path.realpath(__file__)


def visible_devices():
    """The GPUs lfm gave the call (docs/gpu.md)."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def make_local_instance(value):
    """An instance of a class defined inside the call (pickle cannot send it by name)."""

    class Local:
        def __init__(self, held):
            self.held = held

    return Local(value)


def make_local_class():
    """A class defined inside the call (Parsl's test_lifted returns one)."""
    from dataclasses import dataclass

    @dataclass
    class Made:
        a: str = "X"

    return Made


def raise_local_exception(message):
    """An exception whose class is defined inside the call."""

    class LocalError(Exception):
        pass

    raise LocalError(message)


def working_directory():
    return os.getcwd()


def serve_pid():
    """The pid of the lfm serve this call runs under (its zygote's parent)."""
    with open(f"/proc/{os.getppid()}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])
