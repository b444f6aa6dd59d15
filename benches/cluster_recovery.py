#!/usr/bin/env python3
"""Recovery time of a cluster job after kill -9 of a TaskManager.

A JobManager and three TaskManagers (one slot each) on loopback run a
checkpointed GROUP BY over KEYS keys at parallelism 2 (the third
TaskManager is spare). Once a checkpoint holds every key, the first
TaskManager that runs a part is killed with SIGKILL. Measured from the kill:
  - restarted: the JobManager has deployed the next attempt;
  - restored:  every part of it has restored its state and runs
               (the TaskManagers' "Running" lines);
  - checkpoint: the next attempt completed its first checkpoint.
Prints the median of several runs.

    cargo build --release && benches/cluster_recovery.py [--keys 1000000] [--runs 3]
"""

import argparse
import os
import queue
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time

WEIR = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "weir")


class Process:
    """A weir process whose stderr lines are read with their arrival time."""

    def __init__(self, args):
        self.proc = subprocess.Popen([WEIR, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.put((time.monotonic(), line.rstrip()))

    def wait_for(self, text, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            at, line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if text in line:
                return at, line

    def has_line(self, text, timeout):
        """Whether a line containing `text` arrives within `timeout` seconds."""
        try:
            self.wait_for(text, timeout)
            return True
        except queue.Empty:
            return False

    def drain(self):
        """Forgets the lines read so far."""
        while not self.lines.empty():
            self.lines.get_nowait()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def one_run(keys, heartbeat_timeout, work):
    jm = Process(["jobmanager", "--port", "0", "--rest-port", "0",
                  "--heartbeat-interval", "1s", "--heartbeat-timeout", heartbeat_timeout])
    procs = [jm]
    try:
        _, line = jm.wait_for("listening on")
        address = line.rsplit(" ", 1)[1].rstrip(".")
        tms = []
        for _ in range(3):
            tm = Process(["taskmanager", "--jobmanager", address, "--slots", "1"])
            procs.append(tm)
            jm.wait_for(f"TaskManager tm-{tm.proc.pid}-")
            tms.append(tm)
        rate = 1_000_000
        sql = os.path.join(work, "job.sql")
        with open(sql, "w") as f:
            f.write(f"""
SET 'parallelism.default' = '2';
SET 'execution.checkpointing.interval' = '1 s';
SET 'execution.checkpointing.dir' = '{work}/checkpoints';
CREATE TABLE seq (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '{rate}',
  'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '999999999');
CREATE TABLE sink (k BIGINT, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole');
INSERT INTO sink SELECT id % {keys}, COUNT(*), SUM(id) FROM seq GROUP BY id % {keys};
""")
        client = Process(["run", "--jobmanager", address, sql])
        procs.append(client)
        jm.wait_for("attempt 0 deployed")
        victim = next(tm for tm in tms if tm.has_line("Running", 10))
        # A checkpoint triggered after every key was seen holds them all.
        time.sleep(keys / rate + 1.5)
        jm.wait_for("Checkpoint")
        jm.wait_for("Checkpoint")
        for p in [jm, *tms]:
            p.drain()
        killed = time.monotonic()
        victim.kill()
        restarted, _ = jm.wait_for("deployed on 2 TaskManager(s)")
        running = [tm.wait_for("Running")[0] for tm in tms if tm is not victim]
        checkpoint, _ = jm.wait_for("Checkpoint")
        return restarted - killed, max(running) - killed, checkpoint - killed
    finally:
        for p in procs:
            p.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--heartbeat-timeout", default="10s")
    args = parser.parse_args()
    results = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as work:
            results.append(one_run(args.keys, args.heartbeat_timeout, work))
            print(f"run {run + 1}: restarted {results[-1][0]:.2f} s, restored {results[-1][1]:.2f} s, "
                  f"first checkpoint {results[-1][2]:.2f} s", flush=True)
    med = [statistics.median(r[i] for r in results) for i in range(3)]
    print(f"median of {args.runs} (keys {args.keys}, heartbeat timeout {args.heartbeat_timeout}): "
          f"restarted {med[0]:.2f} s, restored {med[1]:.2f} s, first checkpoint {med[2]:.2f} s after kill -9")


if __name__ == "__main__":
    main()
