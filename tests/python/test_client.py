"""test_client.py: the Python client package (client/python/distir) against a
real distird on loopback, with Debian's python3-grpcio.

    test_client.py BUILD_DIR

Prints "ok - ..." / "FAIL - ..." per check; exit status 1 on any failure.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build/release"
sys.path.insert(0, os.path.join(BUILD, "python"))
import distir  # noqa: E402
from distir import distir_pb2 as distir_pb  # noqa: E402

DISTIR = os.path.join(BUILD, "distir")
TMP = tempfile.mkdtemp(prefix="distir-pyc.")
FAILURES = []


def check(desc, cond, detail=""):
    print(("ok - " if cond else "FAIL - ") + desc + ("" if cond or detail == "" else f": {detail}"))
    if not cond:
        FAILURES.append(desc)


def gen(name, layers, seq):
    path = os.path.join(TMP, name + ".pb")
    subprocess.run([DISTIR, "model", "gpt", "--layers", str(layers), "--hidden", "64", "--heads",
                    "4", "--seq", str(seq), "--vocab", "64", "--batch", "8", "-o", path],
                   check=True, capture_output=True)
    return path


def main():
    base, deeper, wider = gen("base", 2, 16), gen("deeper", 3, 16), gen("wider", 2, 32)
    out = open(os.path.join(TMP, "d.out"), "w+")
    proc = subprocess.Popen([os.path.join(BUILD, "distird"), "--listen", "127.0.0.1:0", "--db",
                             os.path.join(TMP, "d.db"), "--log-file", os.path.join(TMP, "d.log")],
                            stdout=out, stderr=subprocess.STDOUT)
    addr = None
    for _ in range(200):
        out.seek(0)
        for line in out.read().splitlines():
            if line.startswith("distird listening on "):
                addr = line.split()[-1]
        if addr or proc.poll() is not None:
            break
        time.sleep(0.05)
    if addr is None:
        print("FAIL - distird did not start")
        return 1
    try:
        with distir.Client(addr, distir=DISTIR, project="pytest") as c:
            r1 = c.simulate(base, "a100-dgx")
            r2 = c.simulate(base, "a100-dgx")
            check("simulate: a miss then a hit with the same key",
                  not r1.cache_hit and r2.cache_hit and r1.cache_key == r2.cache_key)
            inproc = subprocess.run([DISTIR, "simulate", base, "--hw", "a100-dgx", "--json"],
                                    capture_output=True, text=True, check=True).stdout
            import json
            check("simulate: the step time is the CLI's in-process one, exactly",
                  r1.step_time_s == json.loads(inproc)["step_time_s"])
            local = json.loads(inproc)
            check("simulate: MFU, HFU and tokens/s are the CLI's, computed by the daemon",
                  r1.mfu == local["mfu"] and r1.hfu == local["hfu"] and r1.mfu > 0
                  and r1.tokens_per_s == local["tokens_per_s"] and r1.tokens_per_s > 0)
            text = c.simulate(os.path.join("tests", "ir", "seed001_mlp.dir"), "a100-dgx")
            check("simulate: IR text converted through the CLI", text.step_time_s > 0)
            batch = c.simulate_batch(base, "a100-dgx:8", [{"dp": 1}, {"dp": 2}, {"dp": 3}])
            check("simulate_batch: one entry per strategy, an error for dp=3",
                  isinstance(batch[0], distir.Result) and isinstance(batch[1], distir.Result)
                  and isinstance(batch[2], distir.DistirError), batch)
            check("get_result by key", c.get_result(r1.cache_key).step_time_s == r1.step_time_s)
            try:
                c.get_result("0" * 64)
                check("get_result of an unknown key raises", False)
            except distir.DistirError as e:
                check("get_result of an unknown key raises NOT_FOUND", e.code.name == "NOT_FOUND")
            e1 = c.set_baseline("train", base, "a100-dgx", label="c1")
            check("set_baseline returns the entry", e1.label == "c1" and e1.step_time_s == r1.step_time_s)
            same = c.compare(base, baseline="train", hardware="a100-dgx")
            check("compare: the unchanged model does not regress",
                  not same.regressed and same.metrics["step_time_s"].delta == 0)
            deep = c.compare(deeper, baseline="train", hardware="a100-dgx")
            check("compare: one more layer regresses step time",
                  deep.regressed and deep.metrics["step_time_s"].regressed
                  and deep.metrics["step_time_s"].delta > 0)
            check("compare: the baseline entry is returned", deep.baseline.label == "c1")
            wide = c.compare(wider, baseline="train", hardware="a100-dgx", max_time_regression=1.0)
            check("compare: wider activations regress memory, time within 100%",
                  wide.metrics["peak_memory_bytes"].regressed
                  and not wide.metrics["step_time_s"].regressed
                  and wide.explanation["memory_by_class"]["activations"] > 0)
            d = deep.metrics["peak_memory_bytes"].delta
            edge = c.compare(deeper, baseline="train", hardware="a100-dgx",
                             max_time_regression=1.0, max_memory_regression_bytes=int(d))
            below = c.compare(deeper, baseline="train", hardware="a100-dgx",
                              max_time_regression=1.0, max_memory_regression_bytes=int(d) - 1)
            check("compare: a memory allowance equal to the growth passes, one byte less fails",
                  not edge.regressed and below.regressed)
            two = c.compare(deeper, against=base, hardware="a100-dgx")
            check("compare: two modules without a baseline", two.regressed and two.baseline is None)
            c.set_baseline("fused", base, "a100-dgx", options={"fuse": True})
            fsame = c.compare(base, baseline="fused", hardware="a100-dgx", options={"fuse": True})
            feager = c.compare(base, baseline="fused", hardware="a100-dgx")
            check("compare: options reach the simulations (fused against a fused baseline is "
                  "equal, eager kernels regress step time)",
                  not fsame.regressed and feager.metrics["step_time_s"].regressed)
            check("compare: settings_differ names the kernels (and nothing when they agree)",
                  feager.settings_differ == [{"setting": "kernels", "baseline": "fused",
                                              "candidate": "eager"}]
                  and fsame.settings_differ == [])
            c.set_baseline("train", deeper, "a100-dgx", label="c2")
            h = c.history("train")
            check("history: every baseline, oldest first", [e.label for e in h] == ["c1", "c2"])
            try:
                c.history("train", project="elsewhere")
                check("another project sees no history", False)
            except distir.DistirError as e:
                check("another project sees no history (NOT_FOUND)", e.code.name == "NOT_FOUND")
            # A model by name: the daemon generates the module the CLI writes.
            opts = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16",
                    "--vocab", "64", "--batch", "8", "--dtype", "bf16", "--optimizer", "adam"]
            gpt_file = os.path.join(TMP, "gpt.pb")
            subprocess.run([DISTIR, "model", "gpt", *opts, "-o", gpt_file], check=True)
            spec = distir.Model("gpt", layers=2, hidden=64, heads=4, seq=16, vocab=64, batch=8,
                                dtype="bf16", optimizer="adam")
            by_file = c.simulate(gpt_file, "a100-dgx:1", {"dp": 2, "pp": 2})
            by_name = c.simulate(spec, "a100-dgx:1", {"dp": 2, "pp": 2})
            check("Model: the file's cache key and result, answered from the cache",
                  by_name.cache_key == by_file.cache_key and by_name.cache_hit
                  and by_name.step_time_s == by_file.step_time_s)
            batch = c.simulate_batch(spec, "a100-dgx:1", [{"dp": 2}, {"tp": 2}])
            check("Model: SimulateBatch", all(isinstance(b, distir.Result) for b in batch))
            for bad, why in ((distir.Model("gpt", layers="x"), "positive integer"),
                             (distir.Model("gpt", wings=2), "unknown option '--wings'"),
                             (distir.Model("gpt9"), "known: gpt3-125m"),
                             (distir.Model("gpt", layers=10**9), "over the limit"),
                             (distir.Model("gpt", seq=2**22), "is refused here"),
                             (distir.Model("gpt", hidden=2**36, heads=1), "is refused here")):
                try:
                    c.simulate(bad, "a100-dgx:1")
                    check(f"Model: {bad!r} is refused", False)
                except distir.DistirError as e:
                    check(f"Model: {bad!r} is refused with a clear error ({e.code.name})",
                          e.code.name in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED")
                          and why in e.message, e.message)
            both = distir_pb.SimulateRequest(module=distir.load_module(gpt_file, DISTIR),
                                             model=spec.message())
            try:
                c._unary("Simulate", both, distir_pb.SimulateReply)
                check("a module and a model together are refused", False)
            except distir.DistirError as e:
                check("a module and a model together are refused (INVALID_ARGUMENT)",
                      e.code.name == "INVALID_ARGUMENT" and "send one" in e.message, e.message)
            events = []
            s = c.search(base, "a100-dgx", devices=4, top_k=3, progress=events.append)
            check("search: a result with top points",
                  len(s.top) >= 1 and s.top[0].step_time_s > 0 and s.json["top"])
            f = c.search(base, "a100-dgx", devices=4, top_k=3, kernels="fused")
            check("search: kernels=\"fused\" is another search (key), faster at its best, and "
                  "pruned by its time bound",
                  f.json["search_key"] != s.json["search_key"]
                  and f.top[0].step_time_s < s.top[0].step_time_s
                  and f.counts.get("time_bound", 0) > 0,
                  (f.top[0].step_time_s, s.top[0].step_time_s, f.counts))
            try:
                c.search(base, "a100-dgx", devices=4, kernels="jit")
                check("search: an unknown kernels value is refused", False)
            except ValueError:
                check("search: an unknown kernels value is refused (ValueError)", True)
            target = s.top[0].step_time_s * 1.5
            d = c.search(base, "a100-dgx", devices=[1, 2, 4], top_k=3, objective="devices",
                         target_step_s=target, price_per_device_hour=2.0, train_tokens=1e9)
            best = d.json["top"][0]
            check("search: the devices objective over counts 1, 2, 4 reaches the target with "
                  "no more devices than the time objective's best",
                  d.json["device_counts"] == [1, 2, 4] and best["step_time_s"] <= target
                  and best["dp"] * best["tp"] * best["pp"] <= 4 and best["train_cost"] > 0,
                  best)
            moe = distir.Model("llama", layers=2, hidden=64, heads=4, kv_heads=2, ffn=96,
                               experts=4, moe_ffn=32, seq=16, vocab=64, batch=8)
            x = c.search(moe, "a100-dgx", devices=4, top_k=1000, constraints={"cp": [1, 2],
                                                                             "dp": [2]})
            pts = x.json["top"]
            check("search: constraints reach the daemon; its space has context and expert "
                  "parallelism for a mixture of experts",
                  pts and all(p["dp"] == 2 for p in pts)
                  and any(p.get("cp", 1) == 2 for p in pts)
                  and any(p.get("ep", 1) == 2 for p in pts)
                  and any(p.get("ep", 1) == 2 and p.get("cp", 1) == 2 for p in pts),
                  [(p["strategy"]) for p in pts[:5]])
            try:
                c.search(base, "a100-dgx", devices=4, objective="devices")
                check("search: the devices objective without a target is refused", False)
            except distir.DistirError as e:
                check("search: the devices objective without a target is refused "
                      "(INVALID_ARGUMENT)", e.code.name == "INVALID_ARGUMENT"
                      and "target" in e.message, e.message)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        check("distird exits 0", rc == 0, rc)
        shutil.rmtree(TMP, ignore_errors=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
