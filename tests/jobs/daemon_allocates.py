"""A job that double-forks a daemon (fork, setsid, fork; the middle process exits at once) which
allocates 500 MiB and keeps it; the job itself waits a while and exits 0.

    python daemon_allocates.py PIDFILE [MIB] [SECONDS]"""

import os
import sys
import time

pidfile = sys.argv[1]
mib = int(sys.argv[2]) if len(sys.argv) > 2 else 500
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        time.sleep(0.3)  # orphaned by now
        held = bytearray(mib << 20)
        held[::4096] = b"\x01" * len(held[::4096])
        time.sleep(60)
        os._exit(0)
    os._exit(0)
os.wait()
time.sleep(seconds)
