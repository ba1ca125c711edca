"""distir: a Python client for the distird cost-model daemon.

Pure Python over Debian's python3-grpcio and python3-protobuf. The message
classes (distir_pb2) are generated from proto/distir.proto by `make` (protoc
--python_out); the service calls below are written by hand against the
method names, as grpc_tools (which would generate them) is not packaged by
Debian 12.

    import distir
    with distir.Client("127.0.0.1:7878") as c:
        r = c.simulate("model.pb", hardware="a100-dgx:2", strategy={"dp": 2})
        print(r.step_time_s, r.peak_memory_bytes, r.cache_hit)
        big = c.simulate(distir.Model("gpt3-175b", batch=1536, dtype="bf16", optimizer="adam"),
                         hardware="a100-dgx:128", strategy={"dp": 8, "tp": 8, "pp": 16,
                                                            "microbatches": 192})
        c.set_baseline("train-step", "model.pb", hardware="a100-dgx:2", label="abc123")
        cmp = c.compare("model.pb", baseline="train-step", hardware="a100-dgx:2",
                        max_time_regression=0.02)
        if cmp.regressed:
            raise SystemExit(cmp.text)
"""

from .client import (  # noqa: F401
    BaselineEntry,
    Client,
    Comparison,
    DistirError,
    Metric,
    Model,
    Result,
    SearchOutcome,
    load_module,
    strategy_message,
)

__all__ = ["BaselineEntry", "Client", "Comparison", "DistirError", "Metric", "Model", "Result",
           "SearchOutcome", "load_module", "strategy_message"]
