"""A job that leaves the cgroup it was placed in (writes its pid into the parent cgroup's
cgroup.procs, in every hierarchy it can, or in those named), then allocates 600 MiB and keeps it a while.

    python leaves_cgroup.py [MIB] [SECONDS] [CONTROLLER,...]

CONTROLLER: a v1 hierarchy's controller (memory, cpu, cpuacct) or "unified"; all of them when not given."""

import os
import sys
import time

only = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else None
left = []
with open("/proc/self/cgroup") as f:
    for line in f:
        _, controllers, path = line.rstrip("\n").split(":", 2)
        controllers = controllers or "unified"
        mount = "/sys/fs/cgroup/" + controllers.replace("name=", "")
        if controllers == "unified" and not os.path.isdir(mount):
            mount = "/sys/fs/cgroup"  # cgroup v2 alone
        parent = os.path.dirname(path.rstrip("/")) if path.strip("/") else None
        if parent is None or not os.path.isdir(mount):
            continue
        if only is not None and not only & set(controllers.split(",")):
            continue
        try:
            with open(os.path.join(mount + parent, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
            left.append(controllers)
        except OSError:
            pass
print("left", ",".join(left) or "nothing", flush=True)
held = bytearray((int(sys.argv[1]) if len(sys.argv) > 1 else 600) << 20)
held[::4096] = b"\x01" * len(held[::4096])
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 3.0)
