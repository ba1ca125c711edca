"""regression_check.py: the Python client in a few lines.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/regression_check.py \
        ADDR MODEL [--set-baseline LABEL]

Simulates MODEL (IR text, protobuf or ONNX; non-.pb files are converted with
the distir CLI on PATH) on a100-dgx:8 with data parallelism 8, prints the
figures, and either records the result as the baseline "train-step" or
compares with it, exiting 1 on a regression of more than 2% in step time or
5% in peak memory.
"""
import sys

import distir


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    addr, model = sys.argv[1], sys.argv[2]
    hw, strategy = "a100-dgx:8", {"dp": 8}
    with distir.Client(addr) as c:
        r = c.simulate(model, hw, strategy)
        print(f"step time {r.step_time_s * 1e3:.3f} ms, peak memory "
              f"{r.peak_memory_bytes / 2**20:.1f} MiB, MFU {r.mfu:.1%}"
              f" ({'cache hit' if r.cache_hit else 'simulated'})")
        if len(sys.argv) > 4 and sys.argv[3] == "--set-baseline":
            e = c.set_baseline("train-step", model, hw, strategy, label=sys.argv[4])
            print(f"baseline train-step set to {e.label}")
            return 0
        cmp = c.compare(model, baseline="train-step", hardware=hw, strategy=strategy,
                        max_time_regression=0.02, max_memory_regression=0.05)
        print(cmp.text, end="")
        return 1 if cmp.regressed else 0


if __name__ == "__main__":
    sys.exit(main())
