"""The call of bench/pays.py: hold a known amount of memory while waiting, as an I/O-bound task
does (a download, a remote query), so that memory and not the CPU bounds how many run at once."""
import time


def hold(mib, seconds):
    data = bytearray(b"\x01") * (mib << 20)
    time.sleep(seconds)
    return len(data)
