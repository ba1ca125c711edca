"""daemon_sigkill.py: distird killed with SIGKILL under write load, ROUNDS times
on the same database; nothing acknowledged is ever lost.

    daemon_sigkill.py BUILD_DIR ROUNDS

Each round starts distird on the database left by the previous one, runs
four Debian python3-grpcio clients that each send Simulate calls with keys
never asked before (the MLP of seed 001 on a100-dgx:N, N counting up), and
kills the daemon with SIGKILL at a random moment (a fixed seed: the same
moments on every run). Every reply received before the kill is
acknowledged: its result must be readable by GetResult(cache_key) after
the restart, byte for byte the acknowledged one. At the end the database
passes PRAGMA integrity_check. Prints "ok - ..." / "FAIL - ..." per check;
exit status 1 on any failure. make test runs 10 rounds, bench/ 100.
"""

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import grpc

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build/release"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
DISTIRD = os.path.join(BUILD, "distird")
DISTIR = os.path.join(BUILD, "distir")
TMP = tempfile.mkdtemp(prefix="distir-kill.")
DB = os.path.join(TMP, "kill.db")
FAILURES = []

subprocess.run(["protoc", "--python_out=" + TMP, "-Iproto", "proto/distir.proto"], check=True)
sys.path.insert(0, TMP)
import distir_pb2 as pb  # noqa: E402

SVC = "/distir.v1.CostModel/"


def check(desc, cond, detail=""):
    if cond:
        print("ok - " + desc)
    else:
        print("FAIL - " + desc + (": " + str(detail) if detail else ""))
        FAILURES.append(desc)


def start():
    out = open(os.path.join(TMP, "out"), "w+")
    proc = subprocess.Popen([DISTIRD, "--listen", "127.0.0.1:0", "--db", DB, "--workers", "2",
                             "--log-file", os.path.join(TMP, "log")],
                            stdout=out, stderr=subprocess.STDOUT)
    deadline = time.time() + 20
    while time.time() < deadline:
        out.seek(0)
        for line in out.read().splitlines():
            if line.startswith("distird listening on "):
                return proc, line.split()[-1]
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    raise RuntimeError("distird did not start")


def unary(channel, method, req, reply_cls, timeout=20):
    return channel.unary_unary(SVC + method, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=reply_cls.FromString)(req, timeout=timeout)


def main():
    subprocess.run([DISTIR, "convert", "tests/ir/seed001_mlp.dir", "-o",
                    os.path.join(TMP, "mlp.pb")], check=True)
    with open(os.path.join(TMP, "mlp.pb"), "rb") as f:
        mlp = pb.Module.FromString(f.read())
    rng = random.Random(20261125)
    acked = {}  # cache_key -> serialized SimResult
    previous = {}  # the last round's acknowledgements, checked at the next start
    counter = [0]
    lock = threading.Lock()
    lost = 0
    for rnd in range(ROUNDS):
        proc, addr = start()
        channel = grpc.insecure_channel(addr)
        # What the last round acknowledged survived its kill (all of it at the end).
        missing = 0
        for key, blob in previous.items():
            try:
                r = unary(channel, "GetResult", pb.GetResultRequest(cache_key=key),
                          pb.SimulateReply)
                if r.result.SerializeToString() != blob:
                    missing += 1
            except grpc.RpcError:
                missing += 1
        lost += missing
        stop = threading.Event()
        previous = {}

        def client():
            while not stop.is_set():
                with lock:
                    counter[0] += 1
                    n = counter[0]
                req = pb.SimulateRequest(module=mlp,
                                         hardware=pb.HardwareRef(preset="a100-dgx:%d" % n))
                try:
                    r = unary(channel, "Simulate", req, pb.SimulateReply, timeout=5)
                except grpc.RpcError:
                    return  # the daemon was killed
                with lock:
                    acked[r.cache_key] = previous[r.cache_key] = r.result.SerializeToString()

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.2 + rng.random() * 0.6)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
        channel.close()
        if missing:
            print("# round %d: %d acknowledged results missing" % (rnd, missing))
    # A last start: the final round's acknowledgements too, then a clean stop.
    proc, addr = start()
    channel = grpc.insecure_channel(addr)
    for key, blob in acked.items():
        try:
            r = unary(channel, "GetResult", pb.GetResultRequest(cache_key=key), pb.SimulateReply)
            lost += r.result.SerializeToString() != blob
        except grpc.RpcError:
            lost += 1
    channel.close()
    proc.send_signal(signal.SIGTERM)
    check("distird exits 0 after %d kills" % ROUNDS, proc.wait(timeout=30) == 0)
    check("%d SIGKILLs under write load: %d results acknowledged, all readable after restarts"
          % (ROUNDS, len(acked)), lost == 0, "%d lost" % lost)
    check("enough load to mean something (at least 5 acknowledged per round)",
          len(acked) >= 5 * ROUNDS, len(acked))
    db = sqlite3.connect(DB)
    check("PRAGMA integrity_check ok", db.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    db.close()
    shutil.rmtree(TMP, ignore_errors=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
