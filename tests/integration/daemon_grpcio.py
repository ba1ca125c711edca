"""daemon_grpcio.py: distird called from Python grpcio (Debian's python3-grpcio,
a gRPC implementation nobody on this project wrote), with message classes
generated at test time by `protoc --python_out` from proto/distir.proto.

Run by tests/integration/test_daemon_python.sh with /usr/bin/python3:
    daemon_grpcio.py BUILD_DIR

Checks, each printed as "ok - ..." or "FAIL - ...":
  Simulate (miss, then hit with an identical result and key; equal to the
  in-process CLI), GetResult, SimulateBatch streaming (entries per candidate,
  in completion order, errors per candidate), health Check SERVING and
  NOT_SERVING during shutdown, UNIMPLEMENTED for unknown methods,
  INVALID_ARGUMENT for garbage bytes (Simulate, ServerInfo), a string holding a NUL byte, a too-deep message and an invalid
  module, RESOURCE_EXHAUSTED over --max-ops, --max-message-mb and --max-queue,
  DEADLINE_EXCEEDED with a 50 ms deadline while the worker stops, identical
  concurrent requests computed once, and SIGTERM during a batch: the stream
  completes, distird exits 0, PRAGMA integrity_check is ok.
"""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build/release"
DISTIRD = os.path.join(BUILD, "distird")
DISTIR = os.path.join(BUILD, "distir")
TMP = tempfile.mkdtemp(prefix="distir-py.")
FAILURES = []
DAEMONS = []

# Stubs from the .proto, generated now (not checked in).
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


class Daemon:
    def __init__(self, name, *flags):
        self.name = name
        self.db = os.path.join(TMP, name + ".db")
        self.log = os.path.join(TMP, name + ".log")
        self.out = open(os.path.join(TMP, name + ".out"), "w+")
        args = [DISTIRD, "--listen", "127.0.0.1:0", "--db", self.db, "--log-file", self.log]
        self.proc = subprocess.Popen(args + list(flags), stdout=self.out, stderr=subprocess.STDOUT)
        DAEMONS.append(self)
        self.addr = None
        self.metrics = None
        deadline = time.time() + 15
        while time.time() < deadline and self.addr is None:
            self.out.seek(0)
            for line in self.out.read().splitlines():
                if line.startswith("distird listening on "):
                    self.addr = line.split()[-1]
                if line.startswith("distird metrics on "):
                    self.metrics = line.split()[-1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.addr is None:
            raise RuntimeError("distird %s did not start" % name)
        self.channel = grpc.insecure_channel(
            self.addr, options=[("grpc.max_send_message_length", 64 << 20)])

    def unary(self, method, req, reply_cls, timeout=10):
        call = self.channel.unary_unary(
            SVC + method if not method.startswith("/") else method,
            request_serializer=(lambda m: m) if isinstance(req, bytes) else
            (lambda m: m.SerializeToString()),
            response_deserializer=reply_cls.FromString if reply_cls else None)
        return call(req, timeout=timeout)

    def stream(self, method, req, reply_cls, timeout=30):
        call = self.channel.unary_stream(
            SVC + method, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply_cls.FromString)
        return call(req, timeout=timeout)

    def health(self, service=""):
        # grpc.health.v1.HealthCheckRequest{service} / HealthCheckResponse{status}, by hand:
        # field 1, string; field 1, varint (1 SERVING, 2 NOT_SERVING).
        s = service.encode()
        req = (b"\x0a" + bytes([len(s)]) + s) if s else b""
        call = self.channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda m: m,
                                        response_deserializer=lambda b: b)
        raw = call(req, timeout=5)
        return {b"": 0, b"\x08\x01": 1, b"\x08\x02": 2}.get(raw, raw)

    def metric(self, name):
        with urllib.request.urlopen("http://%s/metrics" % self.metrics, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[-1])
        return None

    def stop(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None

    def log_text(self):
        with open(self.log) as f:
            return f.read()


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def wait_for(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def module_from_text(path):
    out = os.path.join(TMP, os.path.basename(path) + ".pb")
    subprocess.run([DISTIR, "convert", path, "-o", out], check=True)
    with open(out, "rb") as f:
        return pb.Module.FromString(f.read())


def request(module, preset="a100-dgx", strategy=None):
    r = pb.SimulateRequest(module=module, hardware=pb.HardwareRef(preset=preset))
    if strategy is not None:
        r.strategy.CopyFrom(strategy)
    return r


def main():
    mlp = module_from_text("tests/ir/seed001_mlp.dir")
    inproc = json.loads(subprocess.run(
        [DISTIR, "simulate", "tests/ir/seed001_mlp.dir", "--hw", "a100-dgx", "--json"],
        check=True, capture_output=True).stdout)

    # ---------------------------------------------------------------- basics
    d = Daemon("main", "--workers", "2", "--metrics-listen", "127.0.0.1:0")
    check("health Check answers SERVING", d.health() == 1)
    check("health Check for distir.v1.CostModel is SERVING", d.health("distir.v1.CostModel") == 1)
    c, _ = code_of(lambda: d.health("no.such.Service"))
    check("health Check of an unknown service is NOT_FOUND", c == grpc.StatusCode.NOT_FOUND, c)

    r1 = d.unary("Simulate", request(mlp), pb.SimulateReply)
    check("Simulate: first call is a miss", r1.cache == pb.CACHE_MISS, r1.cache)
    check("Simulate: 64-digit cache key", len(r1.cache_key) == 64)
    check("Simulate: step time equals the in-process result exactly",
          r1.result.step_time_s == inproc["step_time_s"],
          (r1.result.step_time_s, inproc["step_time_s"]))
    check("Simulate: peak memory equals the in-process result",
          r1.result.peak_memory_bytes == inproc["peak_memory_bytes"])
    check("Simulate: per-device busy time equals the in-process result",
          [x.busy_s for x in r1.result.devices] == [x["busy_s"] for x in inproc["devices"]])
    r2 = d.unary("Simulate", request(mlp), pb.SimulateReply)
    check("Simulate: second call is a hit", r2.cache == pb.CACHE_HIT, r2.cache)
    check("Simulate: hit has the same key", r2.cache_key == r1.cache_key)
    check("Simulate: hit result is byte-identical to the fresh one",
          r2.result.SerializeToString() == r1.result.SerializeToString())
    check("Simulate: the repeated request was answered by the request memo",
          d.metric("distird_cache_memo_hits_total") == 1.0)
    explicit = pb.Strategy(dp=1, tp=1, pp=1, microbatches=1)
    r3 = d.unary("Simulate", request(mlp, strategy=explicit), pb.SimulateReply)
    check("Simulate: explicit dp=tp=pp=1 normalizes to the same key (hit)",
          r3.cache == pb.CACHE_HIT and r3.cache_key == r1.cache_key)
    check("Simulate: ... found by decoding (other bytes), not by the memo",
          d.metric("distird_cache_memo_hits_total") == 1.0 and
          d.metric("distird_cache_hits_total") == 2.0)
    r4 = d.unary("Simulate", request(mlp, strategy=pb.Strategy(dp=2)), pb.SimulateReply)
    check("Simulate: a data-parallel strategy is applied (two devices, another key)",
          r4.cache == pb.CACHE_MISS and r4.cache_key != r1.cache_key and
          len(r4.result.devices) == 2 and r4.result.step_time_s > 0,
          (r4.cache, len(r4.result.devices)))
    c, msg = code_of(lambda: d.unary("Simulate", request(mlp, strategy=pb.Strategy(dp=3)),
                                     pb.SimulateReply))
    check("Simulate: an impossible strategy is INVALID_ARGUMENT naming the constraint",
          c == grpc.StatusCode.INVALID_ARGUMENT and "dp=3" in msg, (c, msg))

    # Nested parallelism: per-stage degrees from an independent client equal the CLI's.
    gpt_pb = os.path.join(TMP, "gpt.pb")
    subprocess.run([DISTIR, "model", "gpt", "--layers", "4", "--hidden", "64", "--heads", "4",
                    "--seq", "8", "--vocab", "32", "--batch", "8", "-o", gpt_pb], check=True)
    with open(gpt_pb, "rb") as f:
        gpt = pb.Module.FromString(f.read())
    nested = pb.Strategy(stages=[pb.PipelineStage(dp=2), pb.PipelineStage(tp=2)], microbatches=2)
    rn = d.unary("Simulate", request(gpt, strategy=nested), pb.SimulateReply)
    cli = json.loads(subprocess.run(
        [DISTIR, "simulate", gpt_pb, "--hw", "a100-dgx", "--stages", "2x1,1x2", "--microbatches",
         "2", "--json"], check=True, capture_output=True).stdout)
    check("Simulate: per-stage degrees (2x1, 1x2) run on 4 devices as the CLI's in-process run",
          len(rn.result.devices) == 4 and rn.result.step_time_s == cli["step_time_s"] and
          rn.result.peak_memory_bytes == cli["peak_memory_bytes"],
          (len(rn.result.devices), rn.result.step_time_s, cli["step_time_s"]))
    c, msg = code_of(lambda: d.unary(
        "Simulate", request(gpt, strategy=pb.Strategy(pp=3, stages=[pb.PipelineStage(dp=2)])),
        pb.SimulateReply))
    check("Simulate: a stage list that does not match pp is INVALID_ARGUMENT",
          c == grpc.StatusCode.INVALID_ARGUMENT and "pipeline stages" in msg, (c, msg))

    # Recomputation by op (torchtitan's selective-op) and by block (Megatron-LM's first N
    # layers of each stage) from an independent client equal the CLI's flags.
    for rs, flags in ((pb.Strategy(pp=2, microbatches=2, recompute=pb.RECOMPUTE_SELECTIVE_OP),
                       ["--recompute", "selective-op"]),
                      (pb.Strategy(pp=2, microbatches=2, recompute=pb.RECOMPUTE_FULL,
                                   recompute_layers=1),
                       ["--recompute", "full", "--recompute-layers", "1"])):
        rr = d.unary("Simulate", request(gpt, strategy=rs), pb.SimulateReply)
        cli = json.loads(subprocess.run(
            [DISTIR, "simulate", gpt_pb, "--hw", "a100-dgx", "--pp", "2", "--microbatches", "2",
             "--json"] + flags, check=True, capture_output=True).stdout)
        check("Simulate: %s equals the CLI's in-process run" % " ".join(flags),
              rr.result.step_time_s == cli["step_time_s"] and
              rr.result.peak_memory_bytes == cli["peak_memory_bytes"],
              (rr.result.step_time_s, cli["step_time_s"]))
    c, msg = code_of(lambda: d.unary(
        "Simulate", request(gpt, strategy=pb.Strategy(recompute=pb.RECOMPUTE_SELECTIVE,
                                                      recompute_layers=2)), pb.SimulateReply))
    check("Simulate: recompute_layers without full recomputation is INVALID_ARGUMENT",
          c == grpc.StatusCode.INVALID_ARGUMENT and "recompute_layers" in msg, (c, msg))

    g = d.unary("GetResult", pb.GetResultRequest(cache_key=r1.cache_key), pb.SimulateReply)
    check("GetResult returns the stored result",
          g.cache == pb.CACHE_HIT and g.result.SerializeToString() == r1.result.SerializeToString())
    c, msg = code_of(lambda: d.unary("GetResult", pb.GetResultRequest(cache_key="0" * 64),
                                     pb.SimulateReply))
    check("GetResult of an unknown key is NOT_FOUND", c == grpc.StatusCode.NOT_FOUND, (c, msg))
    c, msg = code_of(lambda: d.unary("GetResult", pb.GetResultRequest(cache_key="xyz"),
                                     pb.SimulateReply))
    check("GetResult of a malformed key is INVALID_ARGUMENT",
          c == grpc.StatusCode.INVALID_ARGUMENT and "hexadecimal" in msg, (c, msg))

    # SimulateBatch: one entry per candidate, errors per candidate, status OK.
    breq = pb.SimulateBatchRequest(module=mlp, hardware=pb.HardwareRef(preset="a100-dgx"))
    breq.strategies.extend([pb.Strategy(), pb.Strategy(dp=2), pb.Strategy(zero=9),
                            pb.Strategy(pp=1)])
    breq_all = breq
    stream = d.stream("SimulateBatch", breq, pb.SimulateReply)
    got = {m.index: m for m in stream}
    check("SimulateBatch: one message per candidate", sorted(got) == [0, 1, 2, 3], sorted(got))
    check("SimulateBatch: stream ends with OK", stream.code() == grpc.StatusCode.OK)
    if len(got) == 4:
        check("SimulateBatch: cached candidates are hits with the Simulate key",
              got[0].cache == pb.CACHE_HIT and got[0].cache_key == r1.cache_key and
              got[3].cache_key == r1.cache_key)
        check("SimulateBatch: batch result equals Simulate's",
              got[0].result.SerializeToString() == r1.result.SerializeToString())
        check("SimulateBatch: dp=2 entry is the Simulate dp=2 result (a hit)",
              got[1].error_code == 0 and got[1].cache_key == r4.cache_key and
              got[1].result.SerializeToString() == r4.result.SerializeToString(),
              (got[1].error_code, got[1].error))
        check("SimulateBatch: zero=9 entry is INVALID_ARGUMENT naming the field",
              got[2].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and
              "zero" in got[2].error, (got[2].error_code, got[2].error))
    empty = pb.SimulateBatchRequest(module=mlp, hardware=pb.HardwareRef(preset="a100-dgx"))
    c, msg = code_of(lambda: list(d.stream("SimulateBatch", empty, pb.SimulateReply)))
    check("SimulateBatch with no strategies is INVALID_ARGUMENT",
          c == grpc.StatusCode.INVALID_ARGUMENT, (c, msg))

    # Unknown methods answer at once.
    t0 = time.time()
    c, msg = code_of(lambda: d.unary("/distir.v1.CostModel/Nope", b"", None, timeout=5))
    check("unknown method is UNIMPLEMENTED", c == grpc.StatusCode.UNIMPLEMENTED, (c, msg))
    check("unknown method answers at once (no deadline wait)", time.time() - t0 < 2)
    c, msg = code_of(lambda: d.unary("/no.such.Service/Call", b"\x01\x02", None, timeout=5))
    check("unknown service is UNIMPLEMENTED naming the method",
          c == grpc.StatusCode.UNIMPLEMENTED and "/no.such.Service/Call" in msg, (c, msg))

    # Bad input.
    c, msg = code_of(lambda: d.unary("Simulate", b"\xff\xff\xff\xff garbage \x0a\x99", None))
    check("garbage bytes are INVALID_ARGUMENT with a message",
          c == grpc.StatusCode.INVALID_ARGUMENT and msg.startswith("request"), (c, msg))
    c, msg = code_of(lambda: d.unary("ServerInfo", b"\xff\xff\xff\xff garbage", None))
    check("ServerInfo: garbage bytes are INVALID_ARGUMENT too",
          c == grpc.StatusCode.INVALID_ARGUMENT and msg.startswith("request"), (c, msg))
    deep = pb.Region()
    for _ in range(200):
        op = pb.Op(kind="dist.pmap")
        op.body.CopyFrom(deep)
        deep = pb.Region(ops=[op])
    bomb = pb.SimulateRequest(module=pb.Module(functions=[pb.Function(name="f", body=deep)]),
                              hardware=pb.HardwareRef(preset="a100-dgx"))
    c, msg = code_of(lambda: d.unary("Simulate", bomb, pb.SimulateReply))
    check("a too-deep message is INVALID_ARGUMENT saying so",
          c == grpc.StatusCode.INVALID_ARGUMENT and "deep" in msg, (c, msg))
    bad = pb.Module()
    bad.CopyFrom(mlp)
    del bad.functions[0].body.ops[0].inputs[1:]
    c, msg = code_of(lambda: d.unary("Simulate", request(bad), pb.SimulateReply))
    check("an invalid module is INVALID_ARGUMENT saying where",
          c == grpc.StatusCode.INVALID_ARGUMENT and "module" in msg and "MatMul" in msg, (c, msg))
    c, msg = code_of(lambda: d.unary("Simulate", request(mlp, preset="tpu-v9"), pb.SimulateReply))
    check("an unknown hardware preset is INVALID_ARGUMENT",
          c == grpc.StatusCode.INVALID_ARGUMENT and "tpu-v9" in msg, (c, msg))
    c, msg = code_of(lambda: d.unary("Simulate", request(mlp, preset="a100-dgx\x00:2"),
                                     pb.SimulateReply))
    check("a preset holding a NUL byte is INVALID_ARGUMENT, not read as 'a100-dgx'",
          c == grpc.StatusCode.INVALID_ARGUMENT and "NUL" in msg and "preset" in msg, (c, msg))
    check("daemon is still serving after bad input", d.health() == 1)
    check("main daemon exits 0 on SIGTERM", d.stop() == 0)

    # ---------------------------------------------------------------- limits
    small = Daemon("small", "--max-ops", "3", "--max-message-mb", "1")
    c, msg = code_of(lambda: small.unary("Simulate", request(mlp), pb.SimulateReply))
    check("a module over --max-ops is RESOURCE_EXHAUSTED with a message",
          c == grpc.StatusCode.RESOURCE_EXHAUSTED and "ops" in msg, (c, msg))
    huge = request(mlp)
    huge.module.functions[0].name = "x" * (2 << 20)
    c, msg = code_of(lambda: small.unary("Simulate", huge, pb.SimulateReply))
    check("a message over --max-message-mb is RESOURCE_EXHAUSTED",
          c == grpc.StatusCode.RESOURCE_EXHAUSTED, (c, msg))
    check("limits daemon exits 0", small.stop() == 0)

    # Every request decoded on a worker (--inline-decode-kb 0): same answers.
    w = Daemon("offload", "--inline-decode-kb", "0", "--max-values", "40")
    wr1 = w.unary("Simulate", request(mlp), pb.SimulateReply)
    wr2 = w.unary("Simulate", request(mlp), pb.SimulateReply)
    check("worker-decoded Simulate: miss then hit, same bytes as the loop-decoded result",
          wr1.cache == pb.CACHE_MISS and wr2.cache == pb.CACHE_HIT and
          wr2.result.SerializeToString() == r1.result.SerializeToString())
    got = {m.index: m for m in w.stream("SimulateBatch", breq_all, pb.SimulateReply)}
    check("worker-decoded SimulateBatch: every candidate answered",
          sorted(got) == [0, 1, 2, 3] and got[0].cache == pb.CACHE_HIT and
          got[1].error_code == 0 and len(got[1].result.devices) == 2, sorted(got))
    c, msg = code_of(lambda: w.unary("Simulate", request(bad), pb.SimulateReply))
    check("worker-decoded invalid module is INVALID_ARGUMENT",
          c == grpc.StatusCode.INVALID_ARGUMENT and "MatMul" in msg, (c, msg))
    c, msg = code_of(lambda: w.unary("Simulate", bomb, pb.SimulateReply))
    check("worker-decoded too-deep message is INVALID_ARGUMENT",
          c == grpc.StatusCode.INVALID_ARGUMENT and "deep" in msg, (c, msg))
    big = pb.Module()
    big.CopyFrom(mlp)
    for i in range(40):
        big.values.add(name="pad%d" % i, type=1)
    c, msg = code_of(lambda: w.unary("Simulate", request(big), pb.SimulateReply))
    check("worker-decoded module over --max-values is RESOURCE_EXHAUSTED",
          c == grpc.StatusCode.RESOURCE_EXHAUSTED and "values" in msg, (c, msg))
    check("offload daemon exits 0", w.stop() == 0)

    # A full queue: one worker busy, one job waiting, the next is refused.
    q = Daemon("queue", "--workers", "1", "--max-queue", "1", "--test-delay-ms", "2000")
    f1 = q.channel.unary_unary(SVC + "Simulate", request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=pb.SimulateReply.FromString)
    futures = [f1.future(request(mlp, preset="a100-dgx"), timeout=10)]
    time.sleep(0.2)
    futures.append(f1.future(request(mlp, preset="h100-dgx"), timeout=10))
    time.sleep(0.2)
    c, msg = code_of(lambda: q.unary("Simulate", request(mlp, preset="v100-dgx1"),
                                     pb.SimulateReply))
    check("a full job queue (--max-queue) is RESOURCE_EXHAUSTED with a message",
          c == grpc.StatusCode.RESOURCE_EXHAUSTED and "queue is full" in msg, (c, msg))
    for f in futures:
        f.cancel()
    check("queue daemon exits 0 (cancelled jobs stop)", q.stop() == 0)

    # ---------------------------------------------------------------- slow jobs
    slow = Daemon("slow", "--workers", "2", "--test-delay-ms", "1000", "--grace-ms", "10000",
                  "--health-delay-ms", "300", "--metrics-listen", "127.0.0.1:0")
    t0 = time.time()
    c, msg = code_of(lambda: slow.unary("Simulate", request(mlp), pb.SimulateReply, timeout=0.05))
    check("a 50 ms deadline on a slow job is DEADLINE_EXCEEDED",
          c == grpc.StatusCode.DEADLINE_EXCEEDED, (c, msg))
    check("the deadline fires on time", time.time() - t0 < 1.0, time.time() - t0)
    check("the worker job stops (cancelled)",
          wait_for(lambda: slow.metric('distird_jobs_total{result="cancelled"}') == 1.0))
    # Counted when the completion queue sees the call end, which may come after the job stops.
    check("the cancelled call is counted",
          wait_for(lambda: slow.metric("distird_calls_cancelled_total") == 1.0))
    check("no result was stored for the cancelled job",
          slow.metric("distird_cache_entries") == 0.0)

    # Identical concurrent requests: computed once.
    results = []

    def call():
        results.append(slow.unary("Simulate", request(mlp, preset="h100-dgx"), pb.SimulateReply))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("4 identical concurrent requests all succeed", len(results) == 4)
    check("... with one key", len({r.cache_key for r in results}) == 1)
    check("... computed by one job",
          slow.metric('distird_jobs_total{result="ok"}') == 1.0,
          slow.metric('distird_jobs_total{result="ok"}'))
    check("... the others waited for it", slow.metric("distird_cache_coalesced_total") == 3.0)

    # Streaming in completion order: the instant error comes before the slow result.
    breq = pb.SimulateBatchRequest(module=mlp, hardware=pb.HardwareRef(preset="v100-dgx1"))
    breq.strategies.extend([pb.Strategy(), pb.Strategy(tp=2), pb.Strategy(zero=7)])
    order = [m.index for m in slow.stream("SimulateBatch", breq, pb.SimulateReply)]
    check("SimulateBatch streams results as they finish (slow candidate last)",
          sorted(order) == [0, 1, 2] and order[-1] == 0, order)

    # SIGTERM during a batch: the stream completes, the daemon exits 0.
    breq = pb.SimulateBatchRequest(module=mlp, hardware=pb.HardwareRef(preset="h200-dgx"))
    breq.strategies.extend([pb.Strategy(dp=4), pb.Strategy(), pb.Strategy(pp=2)])
    stream = slow.stream("SimulateBatch", breq, pb.SimulateReply)
    first = next(stream)
    slow.proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    hs = code_of(lambda: None)
    try:
        hs = slow.health()
    except grpc.RpcError as e:
        hs = e.code()
    check("during shutdown health reports NOT_SERVING", hs == 2, hs)
    served = 0
    for _ in range(12):  # more than the requests kept posted per method
        try:
            slow.unary("ServerInfo", pb.ServerInfoRequest(), pb.ServerInfoReply, timeout=2)
            served += 1
        except grpc.RpcError:
            pass
    check("during the health delay calls are still served", served == 12, served)
    rest = list(stream)
    indices = sorted([first.index] + [m.index for m in rest])
    check("SIGTERM during a batch: every candidate still arrives", indices == [0, 1, 2], indices)
    check("SIGTERM during a batch: the stream ends OK", stream.code() == grpc.StatusCode.OK)
    slow_result = [m for m in [first] + rest if m.index == 1]
    check("SIGTERM during a batch: the slow candidate has its result",
          len(slow_result) == 1 and slow_result[0].result.step_time_s > 0)
    try:
        rc = slow.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    slow.channel.close()
    check("SIGTERM during a batch: distird exits 0", rc == 0, rc)
    con = sqlite3.connect(slow.db)
    check("database integrity_check is ok",
          con.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    key = slow_result[0].cache_key if slow_result else ""
    check("the drained batch result was stored",
          con.execute("SELECT count(*) FROM results WHERE lower(hex(key)) = ?",
                      (key,)).fetchone()[0] == 1, key)
    con.close()
    log = slow.log_text()
    check("log: shutdown, drained, stopped in order",
          0 <= log.find("event=shutdown") < log.find("event=drained") < log.find("event=stopped"))


try:
    main()
except Exception as e:  # a crash is a failure, not a pass
    import traceback
    traceback.print_exc()
    FAILURES.append("exception: %r" % e)
finally:
    for dm in DAEMONS:
        if dm.proc.poll() is None:
            dm.proc.kill()
            dm.proc.wait()
    if FAILURES:
        for dm in DAEMONS:
            try:
                print("--- %s log (tail)" % dm.name)
                print("\n".join(dm.log_text().splitlines()[-15:]))
                dm.out.seek(0)
                print("--- %s standard output and error (tail)" % dm.name)
                print("\n".join(dm.out.read().splitlines()[-40:]))
            except OSError:
                pass
    shutil.rmtree(TMP, ignore_errors=True)

print("%d check(s) failed" % len(FAILURES) if FAILURES else "all checks passed")
sys.exit(1 if FAILURES else 0)
