"""Runs one benchmark command and says how much other processes used the CPUs meanwhile.

    python3 bench/measure.py [--wait-idle SECONDS] -- COMMAND...

Used by bench/run.sh. On a shared machine other processes take cores from the benchmark, and
libtorch's OpenMP threads suffer badly from that (a step can take 50x longer), so before starting
the command it waits, up to --wait-idle seconds, for a second in which other processes used less
than a tenth of a core. It then runs the command (its output passes through) and prints, on
stderr, one line `foreign_cpu <cores>`: the CPU time other processes used during the command
(all CPU time on the machine, from /proc/stat, less the command's own, from getrusage), divided
by the wall time. Exits with the command's status. Standard library only; on systems without
/proc/stat the waiting is skipped and foreign_cpu is reported as nan.
"""

import os
import resource
import subprocess
import sys
import time


def busy_seconds():
    """CPU seconds spent busy since boot, over all CPUs; None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    ticks = [int(v) for v in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / hz


def wait_idle(limit):
    """Waits until other processes use under 0.1 core over one second, for at most `limit` s."""
    if busy_seconds() is None:
        return
    deadline = time.monotonic() + limit
    while True:
        b0, t0 = busy_seconds(), time.monotonic()
        time.sleep(1.0)
        load = (busy_seconds() - b0) / (time.monotonic() - t0)
        if load < 0.1 or time.monotonic() >= deadline:
            return


def main():
    args = sys.argv[1:]
    limit = 0.0
    if args[:1] == ["--wait-idle"]:
        limit = float(args[1])
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if limit > 0:
        wait_idle(limit)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0, t0 = busy_seconds(), time.monotonic()
    status = subprocess.call(args)
    b1, t1 = busy_seconds(), time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if b0 is None:
        foreign = float("nan")
    else:
        foreign = max(0.0, (b1 - b0) - own) / max(t1 - t0, 1e-9)
    print(f"foreign_cpu {foreign:.3f}", file=sys.stderr)
    sys.exit(status)


if __name__ == "__main__":
    main()
