"""A job that outgrows its memory limit: every 0.1 s it keeps 20 MiB more (touched, so it is
really used) and writes 4 MiB of random data to its working directory, until lfm stops it.
The README's plot (docs/img/run.svg) is a run of it."""

import os
import time

held = []
for step in range(200):
    held.append(bytearray(b"\x01") * (20 << 20))
    with open(f"chunk-{step}.bin", "wb") as handle:
        handle.write(os.urandom(4 << 20))
    time.sleep(0.1)
print(f"done: {len(held)} steps")
