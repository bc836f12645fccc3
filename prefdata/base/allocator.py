"""Allocator settings for the commands that stream a whole file through polars and Arrow.

Such a command allocates and frees the same large buffers (a block of the file, a batch's columns,
their normalised copies, the messages it hashes) again and again. By default both allocators hand
freed memory back to the kernel almost at once: glibc trims the freed top of its heap and unmaps
large buffers, and polars' jemalloc purges freed pages within a second. The next buffer then
faults in fresh pages, each zeroed by the kernel: importing 1M JSON Lines pairs took 3.0 million
page faults and 10 s of system time out of 21 s of wall time. Kept for reuse (glibc: no mmap below
32 MB, no trimming, the heap grown 256 MB at a time; jemalloc: freed pages kept 3 s + 3 s), the same
import takes 1.1 million faults and 4.7 s, for 2.9 -> 3.3-3.5 GB peak (bench/RESULTS.md, "Freed memory
kept for reuse"). glibc's three settings work together (tests/test_allocator.py's pattern: 0.77M
faults by default, 0.10M with all three, 0.41M with the best one alone, the heap's growth).

Settings a user gives (MALLOC_* or _RJEM_MALLOC_CONF in the environment) win. Imports nothing of
prefdata's; the standard library only.
"""

from __future__ import annotations

import ctypes
import os
import sys

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # glibc refuses more on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 2**31 - 1  # freed memory at the heap's top is kept up to this much (an int's most)
TOP_PAD = 256 << 20  # the heap grows by this much at a time, not a page at a time
# polars' jemalloc (prefixed _rjem_) reads this once, when polars is first imported
JEMALLOC_CONF = "_RJEM_MALLOC_CONF"
# polars sets dirty_decay_ms:500,muzzy_decay_ms:1000 when it is imported (polars/__init__.py, issue
# pola-rs/polars#18088) and appends what it finds here, which wins. Freed pages kept 3 s, then
# advised free (muzzy) and kept 3 s more. Longer saves few more faults for much more peak memory
# (1M JSON Lines pairs, glibc set as below: 30 s and 0 s, 0.98M faults and 3.9 GB peak; 3 s and 3 s,
# 1.1M and 3.3-3.5 GB; polars' own, 1.6M and 3.3 GB)
JEMALLOC_KEEP_FREED = "dirty_decay_ms:3000,muzzy_decay_ms:3000"


def keep_freed_memory() -> dict[str, bool]:
    """Set both allocators to keep freed memory for reuse; what was set, by allocator. jemalloc's
    setting applies only if polars is not imported yet; glibc's only where the C library is glibc."""
    done = {"jemalloc": False, "glibc": False}
    if "polars" not in sys.modules and JEMALLOC_CONF not in os.environ:
        os.environ[JEMALLOC_CONF] = JEMALLOC_KEEP_FREED
        done["jemalloc"] = True
    if not any(name.startswith("MALLOC_") for name in os.environ):
        done["glibc"] = _glibc_keep_freed()
    return done


def _glibc_keep_freed() -> bool:
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: the C library it runs on
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt): nothing to set
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 when glibc took the value
    return all([mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1,
                mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1,
                mallopt(M_TOP_PAD, TOP_PAD) == 1])
