"""daemon_tls.py: distird over mutual TLS with bearer tokens, called from
Debian's python3-grpcio (run by test_daemon_security.sh, which makes the
certificates and starts the daemon).

    daemon_tls.py ADDR CA CLIENT_CERT CLIENT_KEY ALICE_TOKEN BOB_TOKEN ROOT_TOKEN MODULE_PB

Checks: health answers without a token; a call without a token, or with an
unknown one, is UNAUTHENTICATED; alice's result is readable by alice by key
and NOT_FOUND for bob with the same key, and bob's identical request is a
miss (no cross-tenant hit); ServerInfo shows the database path to the admin
tenant only.
"""
import os
import subprocess
import sys
import tempfile

import grpc

addr, ca, cert, key, alice, bob, root, module_pb = sys.argv[1:9]
TMP = tempfile.mkdtemp(prefix="distir-tls.")
subprocess.run(["protoc", "--python_out=" + TMP, "-Iproto", "proto/distir.proto"], check=True)
sys.path.insert(0, TMP)
import distir_pb2 as pb  # noqa: E402

FAILURES = []


def check(desc, cond, detail=""):
    print(("ok - " if cond else "FAIL - ") + desc + ("" if cond or not detail else ": " + str(detail)))
    if not cond:
        FAILURES.append(desc)


def read(p):
    with open(p, "rb") as f:
        return f.read()


creds = grpc.ssl_channel_credentials(read(ca), read(key), read(cert))
channel = grpc.secure_channel(addr, creds)


def call(method, req, reply_cls, token=None):
    md = [("authorization", "Bearer " + token)] if token else None
    fn = channel.unary_unary("/distir.v1.CostModel/" + method,
                             request_serializer=lambda m: m.SerializeToString(),
                             response_deserializer=reply_cls.FromString)
    return fn(req, timeout=20, metadata=md)


def code(fn):
    try:
        fn()
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


health = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda m: m,
                             response_deserializer=lambda b: b)
check("health answers over mutual TLS without a token", health(b"", timeout=10) == b"\x08\x01")

req = pb.SimulateRequest(module=pb.Module.FromString(read(module_pb)),
                         hardware=pb.HardwareRef(preset="a100-dgx"))
c = code(lambda: call("Simulate", req, pb.SimulateReply))
check("Simulate without a token is UNAUTHENTICATED", c == grpc.StatusCode.UNAUTHENTICATED, c)
c = code(lambda: call("Simulate", req, pb.SimulateReply, "not-a-token"))
check("Simulate with an unknown token is UNAUTHENTICATED", c == grpc.StatusCode.UNAUTHENTICATED, c)

r1 = call("Simulate", req, pb.SimulateReply, alice)
check("alice: first Simulate is a miss", r1.cache == pb.CACHE_MISS, r1.cache)
r2 = call("Simulate", req, pb.SimulateReply, alice)
check("alice: second Simulate is a hit with the same key",
      r2.cache == pb.CACHE_HIT and r2.cache_key == r1.cache_key)
g = call("GetResult", pb.GetResultRequest(cache_key=r1.cache_key), pb.SimulateReply, alice)
check("alice reads her result by key", g.result.step_time_s == r1.result.step_time_s)
c = code(lambda: call("GetResult", pb.GetResultRequest(cache_key=r1.cache_key), pb.SimulateReply,
                      bob))
check("bob cannot read alice's result by key (NOT_FOUND)", c == grpc.StatusCode.NOT_FOUND, c)
b1 = call("Simulate", req, pb.SimulateReply, bob)
check("bob's identical request is a miss: no hit tells him alice asked",
      b1.cache == pb.CACHE_MISS, b1.cache)
check("... with the same (unscoped) key and result",
      b1.cache_key == r1.cache_key and b1.result.step_time_s == r1.result.step_time_s)
info_bob = call("ServerInfo", pb.ServerInfoRequest(), pb.ServerInfoReply, bob)
info_root = call("ServerInfo", pb.ServerInfoRequest(), pb.ServerInfoReply, root)
check("ServerInfo has no database path for a tenant", info_bob.database == "", info_bob.database)
check("ServerInfo shows the path to the admin", info_root.database.endswith(".db"),
      info_root.database)
channel.close()
sys.exit(1 if FAILURES else 0)
