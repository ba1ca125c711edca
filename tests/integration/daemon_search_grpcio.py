"""daemon_search_grpcio.py: distird's Search RPC called from Python grpcio
(Debian's python3-grpcio), with message classes generated at test time by
`protoc --python_out` from proto/distir.proto.

Run by tests/integration/test_daemon_search_python.sh with /usr/bin/python3:
    daemon_search_grpcio.py BUILD_DIR

Checks, each printed as "ok - ..." or "FAIL - ...":
  the stream is progress events then exactly one result, last; the result's
  JSON equals `distir search --json` byte for byte and its fields agree with
  that JSON; progress events arrive at least every 250 ms (candidates slowed
  down by --test-delay-ms), with done non-decreasing, the top K settled in
  them before the end (the result's), the total of the space
  and counts that add up to done; a cancelled search ends CANCELLED, its
  workers stop early, and the daemon stays SERVING and answers the next
  search; garbage bytes and a bad constraint are INVALID_ARGUMENT; a Pareto set
  cut at 1.2 times the fastest step (pareto_within) gives the CLI's JSON; so do
  the rank order (orders, on two nodes) and nested pipelines (nested), whose
  points' Strategy messages carry the order and the stages.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import grpc

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build/release"
DISTIRD = os.path.join(BUILD, "distird")
DISTIR = os.path.join(BUILD, "distir")
TMP = tempfile.mkdtemp(prefix="distir-pysearch.")
FAILURES = []
DAEMONS = []

subprocess.run(["protoc", "--python_out=" + TMP, "-Iproto", "proto/distir.proto"], check=True)
sys.path.insert(0, TMP)
import distir_pb2 as pb  # noqa: E402

SEARCH = "/distir.v1.CostModel/Search"


def check(desc, cond, detail=""):
    if cond:
        print("ok - " + desc)
    else:
        print("FAIL - " + desc + (": " + str(detail) if detail else ""))
        FAILURES.append(desc)


class Daemon:
    def __init__(self, name, *flags):
        self.name = name
        self.log = os.path.join(TMP, name + ".log")
        self.out = open(os.path.join(TMP, name + ".out"), "w+")
        args = [DISTIRD, "--listen", "127.0.0.1:0", "--db", os.path.join(TMP, name + ".db"),
                "--log-file", self.log]
        self.proc = subprocess.Popen(args + list(flags), stdout=self.out, stderr=subprocess.STDOUT)
        DAEMONS.append(self)
        self.addr = None
        deadline = time.time() + 15
        while time.time() < deadline and self.addr is None:
            self.out.seek(0)
            for line in self.out.read().splitlines():
                if line.startswith("distird listening on "):
                    self.addr = line.split()[-1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.addr is None:
            raise RuntimeError("distird %s did not start" % name)
        self.channel = grpc.insecure_channel(self.addr)

    def search(self, req, timeout=60):
        call = self.channel.unary_stream(
            SEARCH, request_serializer=(lambda m: m) if isinstance(req, bytes) else
            (lambda m: m.SerializeToString()),
            response_deserializer=pb.SearchEvent.FromString)
        return call(req, timeout=timeout)

    def health(self):
        call = self.channel.unary_unary("/grpc.health.v1.Health/Check",
                                        request_serializer=lambda m: m,
                                        response_deserializer=lambda b: b)
        return call(b"", timeout=5) == b"\x08\x01"

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


def wait_for(pred, timeout=5.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def search_ends(d):
    """The search_end log lines as dicts of their key=value fields."""
    out = []
    for line in d.log_text().splitlines():
        if "event=search_end" in line:
            out.append(dict(f.split("=", 1) for f in line.split() if "=" in f))
    return out


def small_gpt(batch):
    """A 4-layer GPT of the given batch: its file and its Module message."""
    path = os.path.join(TMP, "gpt%d.pb" % batch)
    subprocess.run([DISTIR, "model", "gpt", "--layers", "4", "--hidden", "48", "--heads", "6",
                    "--seq", "8", "--vocab", "13", "--batch", str(batch), "-o", path], check=True)
    with open(path, "rb") as f:
        return path, pb.Module.FromString(f.read())


def main():
    gpt, module = small_gpt(24)
    flags = ["--devices", "8", "--recompute", "none,full", "--zero", "0,3",
             "--microbatches", "1,2,4", "--top", "3"]
    local = subprocess.run([DISTIR, "search", gpt, "--json"] + flags, check=True,
                           capture_output=True, text=True).stdout

    def request(**kw):
        r = pb.SearchRequest(module=module, hardware=pb.HardwareRef(preset="a100-dgx"),
                             devices=8, top_k=3)
        r.constraints.microbatches.extend([1, 2, 4])
        r.constraints.recomputes = (1 << pb.RECOMPUTE_NONE) | (1 << pb.RECOMPUTE_FULL)
        r.constraints.zero = (1 << 0) | (1 << 3)
        for k, v in kw.items():
            setattr(r, k, v)
        return r

    # ---------------------------------------------------------------- stream and result
    d = Daemon("main", "--workers", "2")
    events = list(d.search(request()))
    kinds = [e.WhichOneof("event") for e in events]
    check("the stream ends with exactly one result", kinds and kinds[-1] == "result"
          and kinds.count("result") == 1, kinds)
    check("progress events come before the result", kinds[0] == "progress", kinds)
    res = events[-1].result
    check("the result's JSON equals `distir search --json` byte for byte",
          res.json + "\n" == local, (res.json[:200], local[:200]))
    j = json.loads(res.json)
    check("the result's fields agree with its JSON",
          res.search_key == j["search_key"] and res.enumerated == j["enumerated"]
          and res.devices == 8 and res.top_k == 3
          and {c.status: c.count for c in res.counts} == j["counts"]
          and [p.index for p in res.top] == [p["index"] for p in j["top"]]
          and [p.strategy for p in res.pareto] == [p["strategy"] for p in j["pareto"]]
          and [p.step_time_s for p in res.top] == [p["step_time_s"] for p in j["top"]])
    check("top points carry their strategy as a message",
          all(p.spec.dp * max(p.spec.tp, 1) * max(p.spec.pp, 1) == 8 and p.status == "ok"
              for p in res.top), [str(p.spec) for p in res.top])
    check("the result counts the whole space", res.space_candidates == res.enumerated == 400,
          (res.space_candidates, res.enumerated))
    check("no candidate log unless asked",
          all(len(e.progress.log) == 0 for e in events if e.WhichOneof("event") == "progress"))

    # SearchRequest.log_candidates: the progress events carry a line per evaluated candidate
    # (K = 4: another search, not the stored one) and a refinement line per worker, all
    # before the result.
    lev = list(d.search(request(top_k=4, log_candidates=True)))
    lines = [ln for e in lev if e.WhichOneof("event") == "progress" for ln in e.progress.log]
    lcounts = {c.status: c.count for c in lev[-1].result.counts}
    cand = [ln for ln in lines if not ln.refinement]
    check("log_candidates: a line per candidate evaluated, a refinement line per worker",
          len(cand) == lcounts["ok"] + lcounts["out_of_memory"] + lcounts["failed"] > 0
          and sorted(ln.worker for ln in lines if ln.refinement) == [0, 1]
          and len({ln.index for ln in cand}) == len(cand)
          and all(ln.strategy.startswith("dp=") and 0 < ln.time_bound_s for ln in cand),
          (len(cand), lcounts))

    # A Pareto set within 1.2 times the fastest step (SearchConstraints.pareto_within): the
    # CLI's answer byte for byte, every point within the ratio, the same top K.
    cut_local = subprocess.run([DISTIR, "search", gpt, "--json", "--pareto-within", "1.2"] + flags,
                               check=True, capture_output=True, text=True).stdout
    creq = request()
    creq.constraints.pareto_within = 1.2
    cres = list(d.search(creq))[-1].result
    cj = json.loads(cres.json)
    check("pareto_within: the daemon's JSON equals the CLI's", cres.json + "\n" == cut_local,
          (cres.json[:200], cut_local[:200]))
    check("pareto_within: every Pareto point within 1.2 times the fastest, the same top K",
          cj["pareto_within"] == 1.2 and cj["pareto"]
          and all(p["step_time_s"] <= 1.2 * cj["pareto"][0]["step_time_s"] for p in cj["pareto"])
          and [p["index"] for p in cj["top"]] == [p["index"] for p in j["top"]],
          [p["step_time_s"] for p in cj["pareto"]])
    check("pareto_within: the whole search's set reaches past the ratio, the cut one is shorter",
          j["pareto"][-1]["step_time_s"] > 1.2 * j["pareto"][0]["step_time_s"]
          and len(cj["pareto"]) < len(j["pareto"]), (len(cj["pareto"]), len(j["pareto"])))

    # ---------------------------------------------------------------- recomputation by op
    # torchtitan's selective-op is in the space only when asked (bit 3 of recomputes): the
    # daemon's answer equals the CLI's, and its points carry the mode.
    sflags = ["--devices", "8", "--recompute", "none,selective-op", "--zero", "0",
              "--microbatches", "2", "--top", "3"]
    slocal = subprocess.run([DISTIR, "search", gpt, "--json"] + sflags, check=True,
                            capture_output=True, text=True).stdout
    sreq = request()
    sreq.constraints.ClearField("microbatches")
    sreq.constraints.microbatches.append(2)
    sreq.constraints.recomputes = (1 << pb.RECOMPUTE_NONE) | (1 << pb.RECOMPUTE_SELECTIVE_OP)
    sreq.constraints.zero = 1 << 0
    sres = list(d.search(sreq))[-1].result
    sj = json.loads(sres.json)
    check("selective-op: the daemon's JSON equals `distir search --json` byte for byte",
          sres.json + "\n" == slocal, (sres.json[:200], slocal[:200]))
    check("... the Pareto set holds selective-op plans, lighter than recomputing nothing",
          any(p.spec.recompute == pb.RECOMPUTE_SELECTIVE_OP for p in sres.pareto)
          and min(p["peak_memory_bytes"] for p in sj["pareto"] if p["recompute"] == 3)
          < min(p["peak_memory_bytes"] for p in sj["pareto"] if p["recompute"] == 0),
          [p["strategy"] for p in sj["pareto"]])

    # Megatron-LM's block recomputation in the space (recompute_layers under full): the
    # daemon's answer equals the CLI's, and its points carry N in their strategy message.
    bflags = ["--devices", "8", "--recompute", "full", "--recompute-layers", "0,1,2", "--zero",
              "0", "--microbatches", "2", "--pp", "1", "--top", "3"]
    blocal = subprocess.run([DISTIR, "search", gpt, "--json"] + bflags, check=True,
                            capture_output=True, text=True).stdout
    breq = request()
    breq.constraints.ClearField("microbatches")
    breq.constraints.microbatches.append(2)
    breq.constraints.recomputes = 1 << pb.RECOMPUTE_FULL
    breq.constraints.recompute_layers.extend([0, 1, 2])
    breq.constraints.pp.append(1)
    breq.constraints.zero = 1 << 0
    bres = list(d.search(breq))[-1].result
    bj = json.loads(bres.json)
    check("recompute_layers: the daemon's JSON equals `distir search --json` byte for byte",
          bres.json + "\n" == blocal, (bres.json[:200], blocal[:200]))
    part = [p for p in list(bres.pareto) + list(bres.top) if p.spec.recompute_layers > 0]
    check("... its points carry recompute_layers in their strategy and their JSON",
          part and all("recompute_layers=%d" % p.spec.recompute_layers in p.strategy
                       for p in part)
          and any(p.get("recompute_layers", 0) > 0 for p in bj["pareto"] + bj["top"]),
          [p["strategy"] for p in bj["pareto"]])

    # ---------------------------------------------------------------- objectives, composition
    # The fewest devices among 2, 4 and 8 that reach a target step time, with the cost and
    # the time to train, and candidates with many microbatches composed: the daemon's JSON
    # equals the CLI's, and composed points carry their full simulation (pp 1 and 2, whose 192
    # microbatches, composed from 4, 6 and 8, save more than SEARCH_COMPOSE_SAVES of them).
    gpt384, module384 = small_gpt(384)
    oflags = ["--devices", "2,4,8", "--objective", "devices", "--target-step", "0.01",
              "--price", "2.5", "--train-tokens", "1e9", "--recompute", "none", "--zero", "0",
              "--microbatches", "4,16,192", "--pp", "1,2", "--schedule", "1f1b", "--top", "3"]
    olocal = subprocess.run([DISTIR, "search", gpt384, "--json"] + oflags, check=True,
                            capture_output=True, text=True).stdout
    oreq = pb.SearchRequest(module=module384, hardware=pb.HardwareRef(preset="a100-dgx"),
                            top_k=3, objective=pb.SEARCH_MIN_DEVICES, target_step_s=0.01,
                            price_per_device_hour=2.5, train_tokens=1e9)
    oreq.device_counts.extend([2, 4, 8])
    oreq.constraints.microbatches.extend([4, 16, 192])
    oreq.constraints.pp.extend([1, 2])
    oreq.constraints.recomputes = 1 << pb.RECOMPUTE_NONE
    oreq.constraints.zero = 1 << 0
    oreq.constraints.schedules = 1 << pb.SCHEDULE_1F1B
    ores = list(d.search(oreq))[-1].result
    oj = json.loads(ores.json)
    check("devices objective: the daemon's JSON equals `distir search --json` byte for byte",
          ores.json + "\n" == olocal, (ores.json[:300], olocal[:300]))
    reach = [p for p in oj["top"] if p["step_time_s"] <= 0.01]
    check("devices objective: the best reaches the target with the fewest devices",
          reach and oj["top"][0] is reach[0]
          and all(p["dp"] * p["tp"] * p["pp"] >= reach[0]["dp"] * reach[0]["tp"] * reach[0]["pp"]
                  for p in reach)
          and oj["device_counts"] == [2, 4, 8] and "train_cost" in oj["top"][0], oj["top"][:1])
    comp = [p for p in ores.pareto if p.composed]
    check("composed points come with their full simulation and their estimate",
          oj["composed"] > 0 and comp
          and all(abs(p.step_time_s - p.estimate_step_time_s) <= 0.01 * p.step_time_s
                  for p in comp), (oj["composed"], [str(p) for p in comp[:1]]))
    top = {p.index for p in ores.top}
    check("... re-simulated in the top K; a Pareto point outside it is marked an estimate",
          all(p.estimate == (p.index not in top) for p in comp)
          and all(p.step_time_s == p.estimate_step_time_s for p in comp if p.estimate)
          and any(p.estimate for p in comp)
          and not any(p.estimate for p in ores.top), [(p.index, p.estimate) for p in comp])

    # ---------------------------------------------------------------- rank order, nested
    # SearchConstraints.orders on two nodes and SearchConstraints.nested from this client:
    # the CLI's answer byte for byte, and the points' Strategy messages carry the order and
    # the stages.
    xflags = ["--hw", "a100-dgx:2", "--devices", "16", "--tp", "1,2", "--pp", "2",
              "--recompute", "none", "--zero", "0", "--microbatches", "2,4", "--order",
              "tp-pp-dp", "--top", "3"]
    xlocal = subprocess.run([DISTIR, "search", gpt, "--json"] + xflags, check=True,
                            capture_output=True, text=True).stdout
    xreq = pb.SearchRequest(module=module, hardware=pb.HardwareRef(preset="a100-dgx:2"),
                            devices=16, top_k=3)
    xreq.constraints.tp.extend([1, 2])
    xreq.constraints.pp.append(2)
    xreq.constraints.microbatches.extend([2, 4])
    xreq.constraints.recomputes = 1 << pb.RECOMPUTE_NONE
    xreq.constraints.zero = 1 << 0
    xreq.constraints.orders = 1 << pb.RANK_ORDER_TP_PP_DP
    xres = list(d.search(xreq))[-1].result
    check("orders: the daemon's JSON equals the CLI's", xres.json + "\n" == xlocal,
          (xres.json[:200], xlocal[:200]))
    check("orders: every point with dp > 1 is in the order tp-pp-dp, in text and message",
          all(p.spec.order == pb.RANK_ORDER_TP_PP_DP and "order=tp-pp-dp" in p.strategy
              for p in list(xres.top) + list(xres.pareto) if p.spec.dp > 1)
          and any(p.spec.dp > 1 for p in xres.top), [p.strategy for p in xres.top])
    nflags = ["--devices", "6", "--nested", "--pp", "2", "--recompute", "none", "--zero", "0",
              "--microbatches", "1,2", "--top", "3"]
    nlocal = subprocess.run([DISTIR, "search", gpt, "--json"] + nflags, check=True,
                            capture_output=True, text=True).stdout
    nreq = pb.SearchRequest(module=module, hardware=pb.HardwareRef(preset="a100-dgx"),
                            devices=6, top_k=3)
    nreq.constraints.nested = True
    nreq.constraints.pp.append(2)
    nreq.constraints.microbatches.extend([1, 2])
    nreq.constraints.recomputes = 1 << pb.RECOMPUTE_NONE
    nreq.constraints.zero = 1 << 0
    nres = list(d.search(nreq))[-1].result
    check("nested: the daemon's JSON equals the CLI's", nres.json + "\n" == nlocal,
          (nres.json[:200], nlocal[:200]))
    nested = [p for p in list(nres.top) + list(nres.pareto) if len(p.spec.stages) > 0]
    check("nested: its points carry their stages, each stage's dp x tp adding up to 6",
          nested and all(len(p.spec.stages) == 2 and "stages=" in p.strategy
                         and sum(st.dp * st.tp for st in p.spec.stages) == 6 for p in nested),
          [p.strategy for p in nres.top])

    try:
        list(d.search(b"\xff\xff\xff"))
        code = grpc.StatusCode.OK
    except grpc.RpcError as e:
        code = e.code()
    check("garbage bytes are INVALID_ARGUMENT", code == grpc.StatusCode.INVALID_ARGUMENT, code)
    bad = request()
    bad.constraints.zero = 1 << 7
    try:
        list(d.search(bad))
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        code, details = e.code(), e.details()
    check("a ZeRO mask with stage 7 is INVALID_ARGUMENT",
          code == grpc.StatusCode.INVALID_ARGUMENT and "zero" in details, (code, details))
    check("distird exits 0", d.stop() == 0)

    # ---------------------------------------------------------------- progress
    slow = Daemon("slow", "--workers", "2", "--test-delay-ms", "4")
    t_prev, gaps, progress = time.monotonic(), [], []
    for e in slow.search(request()):
        now = time.monotonic()
        gaps.append(now - t_prev)
        t_prev = now
        if e.WhichOneof("event") == "progress":
            progress.append(e.progress)
        else:
            final = e.result
    check("several progress events arrive", len(progress) >= 4, len(progress))
    check("events arrive at least every 250 ms", max(gaps) <= 0.25, ["%.3f" % g for g in gaps])
    check("progress: done never decreases and stays within the total",
          all(a.done <= b.done for a, b in zip(progress, progress[1:]))
          and all(p.total == 400 and p.done <= p.total for p in progress))
    check("progress: counts by status add up to done and never decrease",
          all(sum(c.count for c in p.counts) == p.done for p in progress)
          and all(x.count <= y.count for a, b in zip(progress, progress[1:])
                  for x, y in zip(a.counts, b.counts))
          and {c.status for c in progress[-1].counts} == {c.status for c in final.counts})
    check("progress: a best point appears once candidates fit",
          any(p.best.step_time_s > 0 for p in progress))
    check("the slowed search still gives the local JSON", final.json + "\n" == local)
    first = next((i for i, p in enumerate(progress) if len(p.settled_top) > 0), None)
    check("progress: the top K is settled before the search ends (done < total then)",
          first is not None and progress[first].done < progress[first].total,
          [(len(p.settled_top), p.done) for p in progress])
    check("progress: ... in every event after, the result's top K (the same candidates)",
          first is not None
          and all(sorted(q.index for q in p.settled_top) == sorted(q.index for q in final.top)
                  for p in progress[first:]))

    # ---------------------------------------------------------------- cancellation
    slow_cancel = Daemon("cancel", "--workers", "2", "--test-delay-ms", "20")
    call = slow_cancel.search(request())
    seen = 0
    code = None
    try:
        for e in call:
            seen += 1
            if seen == 2:
                call.cancel()
    except grpc.RpcError as e:
        code = e.code()
    check("a cancelled search ends CANCELLED", code == grpc.StatusCode.CANCELLED, code)
    check("the daemon logs the search's end",
          wait_for(lambda: len(search_ends(slow_cancel)) == 1, 5.0))
    ends = search_ends(slow_cancel)
    check("the cancelled search's workers stopped early",
          ends and ends[0]["cancelled"] == "1" and int(ends[0]["done"]) < 400 // 2, ends)
    check("the daemon stays SERVING", slow_cancel.health())
    small = request(devices=2)
    small.constraints.pp.append(1)
    evs = list(slow_cancel.search(small))
    check("the daemon answers the next search",
          evs and evs[-1].WhichOneof("event") == "result" and evs[-1].result.enumerated > 0)
    check("distird exits 0 after a cancelled search", slow_cancel.stop() == 0)
    slow.stop()


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
            except OSError:
                pass
    shutil.rmtree(TMP, ignore_errors=True)

print("%d check(s) failed" % len(FAILURES) if FAILURES else "all checks passed")
sys.exit(1 if FAILURES else 0)
