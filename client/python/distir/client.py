"""The client: typed results over the daemon's gRPC methods (see __init__)."""

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

import grpc

from . import distir_pb2 as pb

_SERVICE = "/distir.v1.CostModel/"

_SCHEDULES = {"default": pb.SCHEDULE_DEFAULT, "gpipe": pb.SCHEDULE_GPIPE,
              "1f1b": pb.SCHEDULE_1F1B, "interleaved": pb.SCHEDULE_INTERLEAVED}
_RECOMPUTE = {"none": pb.RECOMPUTE_NONE, "selective": pb.RECOMPUTE_SELECTIVE,
              "full": pb.RECOMPUTE_FULL}


class DistirError(Exception):
    """A call the daemon refused or failed: code is the gRPC status code."""

    def __init__(self, code, message):
        super().__init__(f"{code.name if code else 'ERROR'}: {message}")
        self.code = code
        self.message = message


@dataclass
class Result:
    """One simulation: the figures people ask for, and the full message."""
    step_time_s: float
    peak_memory_bytes: int
    mfu: float
    bubble_fraction: float
    hfu: float
    tokens_per_s: float
    cache_hit: bool
    cache_key: str
    message: "pb.SimResult" = field(repr=False)


@dataclass
class BaselineEntry:
    label: str
    created: float
    cache_key: str
    step_time_s: float
    peak_memory_bytes: int


@dataclass
class Metric:
    name: str
    baseline: float
    candidate: float
    delta: float
    relative: float
    allowed: float
    regressed: bool


@dataclass
class Comparison:
    regressed: bool
    metrics: Dict[str, Metric]
    explanation: dict
    text: str
    baseline: Optional[BaselineEntry]


@dataclass
class SearchOutcome:
    top: list            # SearchPoint messages, best first
    pareto: list         # ascending step time
    counts: Dict[str, int]
    cached: bool
    json: dict           # the library's JSON (what `distir search --json` prints)


def load_module(module, distir: str = "distir") -> "pb.Module":
    """A Module message from a message, serialized bytes, or a file.

    A .pb file is read as it is; other formats (IR text, ONNX) are converted
    with the distir CLI (`distir convert`), which must be on PATH or given.
    """
    if isinstance(module, pb.Module):
        return module
    if isinstance(module, (bytes, bytearray)):
        return pb.Module.FromString(bytes(module))
    path = os.fspath(module)
    if not path.endswith(".pb"):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "module.pb")
            proc = subprocess.run([distir, "convert", path, "-o", out], capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                raise DistirError(None, f"cannot convert {path}: {proc.stderr.strip()}")
            with open(out, "rb") as f:
                return pb.Module.FromString(f.read())
    with open(path, "rb") as f:
        return pb.Module.FromString(f.read())


def strategy_message(strategy: Union[None, dict, "pb.Strategy"]) -> Optional["pb.Strategy"]:
    """A Strategy message from a dict such as {"dp": 2, "pp": 4, "schedule": "1f1b"}."""
    if strategy is None or isinstance(strategy, pb.Strategy):
        return strategy
    s = pb.Strategy()
    for k, v in strategy.items():
        if k == "schedule":
            s.schedule = _SCHEDULES[v] if isinstance(v, str) else v
        elif k == "recompute":
            s.recompute = _RECOMPUTE[v] if isinstance(v, str) else v
        elif k in ("device_order", "tp_layers"):
            getattr(s, k).extend(v)
        else:
            setattr(s, k, v)
    return s


def _hardware(hw) -> "pb.HardwareRef":
    if isinstance(hw, pb.HardwareRef):
        return hw
    if isinstance(hw, pb.Hardware):
        return pb.HardwareRef(hardware=hw)
    return pb.HardwareRef(preset=hw)


def _entry(e) -> BaselineEntry:
    return BaselineEntry(e.label, e.created, e.cache_key, e.step_time_s, e.peak_memory_bytes)


def _result(reply) -> Result:
    r = reply.result
    return Result(r.step_time_s, r.peak_memory_bytes, r.mfu, r.bubble_fraction, r.hfu,
                  r.tokens_per_s, reply.cache == pb.CACHE_HIT, reply.cache_key, r)


class Client:
    """A connection to distird. TLS when root_certificates (the daemon's CA,
    PEM bytes) or a client certificate is given; token is sent as a bearer
    token on every call. Use as a context manager or call close()."""

    def __init__(self, target: str = "127.0.0.1:7878", *, token: Optional[str] = None,
                 root_certificates: Optional[bytes] = None,
                 private_key: Optional[bytes] = None,
                 certificate_chain: Optional[bytes] = None,
                 timeout: float = 120.0, project: str = "default", distir: str = "distir"):
        options = [("grpc.max_receive_message_length", 1 << 30),
                   ("grpc.max_send_message_length", -1)]
        if root_certificates or certificate_chain:
            creds = grpc.ssl_channel_credentials(root_certificates, private_key,
                                                 certificate_chain)
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._metadata = [("authorization", "Bearer " + token)] if token else None
        self.timeout = timeout
        self.project = project
        self.distir = distir

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- plumbing

    def _unary(self, method, request, reply_cls):
        call = self._channel.unary_unary(_SERVICE + method,
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=reply_cls.FromString)
        try:
            return call(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise DistirError(e.code(), e.details()) from None

    def _stream(self, method, request, reply_cls):
        call = self._channel.unary_stream(_SERVICE + method,
                                          request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=reply_cls.FromString)
        try:
            yield from call(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise DistirError(e.code(), e.details()) from None

    def _request(self, module, hardware, strategy, options=None):
        r = pb.SimulateRequest(module=load_module(module, self.distir),
                               hardware=_hardware(hardware))
        s = strategy_message(strategy)
        if s is not None:
            r.strategy.CopyFrom(s)
        if options:
            r.options.CopyFrom(pb.SimOptions(**options))
        return r

    # ---- methods

    def simulate(self, module, hardware="a100-dgx", strategy=None, *, options=None) -> Result:
        """Step time and memory of module on hardware under strategy (cached by the daemon)."""
        return _result(self._unary("Simulate", self._request(module, hardware, strategy, options),
                                   pb.SimulateReply))

    def simulate_batch(self, module, hardware, strategies) -> List[Union[Result, DistirError]]:
        """Several strategies of one module; one entry per strategy, in order."""
        req = pb.SimulateBatchRequest(module=load_module(module, self.distir),
                                      hardware=_hardware(hardware))
        for s in strategies:
            req.strategies.append(strategy_message(s) or pb.Strategy())
        out: List[Union[Result, DistirError]] = [None] * len(strategies)
        for reply in self._stream("SimulateBatch", req, pb.SimulateReply):
            if reply.error_code:
                code = next((c for c in grpc.StatusCode if c.value[0] == reply.error_code), None)
                out[reply.index] = DistirError(code, reply.error)
            else:
                out[reply.index] = _result(reply)
        return out

    def get_result(self, cache_key: str) -> Result:
        return _result(self._unary("GetResult", pb.GetResultRequest(cache_key=cache_key),
                                   pb.SimulateReply))

    def set_baseline(self, name, module, hardware="a100-dgx", strategy=None, *, label="",
                     project=None) -> BaselineEntry:
        """Simulates module and makes the result the baseline `name` (a new history row)."""
        r = self.simulate(module, hardware, strategy)
        reply = self._unary("SetBaseline", pb.SetBaselineRequest(
            project=project or self.project, name=name, cache_key=r.cache_key, label=label),
            pb.BaselineReply)
        return _entry(reply.entry)

    def compare(self, module, *, baseline=None, against=None, hardware="a100-dgx",
                strategy=None, project=None, max_time_regression=0.0,
                max_time_regression_s=0.0, max_memory_regression=0.0,
                max_memory_regression_bytes=0) -> Comparison:
        """module against the baseline `baseline`, or against another module (`against`).

        Allowances: relative (fractions: 0.02 is 2%) and absolute; a metric
        regresses when it grows by more than the larger of the two."""
        if (baseline is None) == (against is None):
            raise ValueError("give baseline= or against=, one of them")
        cand = self.simulate(module, hardware, strategy)
        req = pb.CompareRequest(project=project or self.project, cache_key=cand.cache_key,
                                limits=pb.CompareLimits(
                                    time_rel=max_time_regression, time_abs_s=max_time_regression_s,
                                    memory_rel=max_memory_regression,
                                    memory_abs_bytes=max_memory_regression_bytes))
        if baseline is not None:
            req.baseline = baseline
        else:
            req.base_cache_key = self.simulate(against, hardware, strategy).cache_key
        reply = self._unary("Compare", req, pb.CompareReply)
        d = json.loads(reply.json)
        metrics = {m["name"]: Metric(m["name"], m["baseline"], m["candidate"], m["delta"],
                                     m["relative"], m["allowed"], m["regressed"])
                   for m in d["metrics"]}
        return Comparison(reply.regressed, metrics, d["explanation"], reply.text,
                          _entry(reply.baseline) if reply.HasField("baseline") else None)

    def history(self, name, *, project=None) -> List[BaselineEntry]:
        """Every baseline set under `name`, oldest first."""
        reply = self._unary("History", pb.HistoryRequest(project=project or self.project,
                                                         name=name), pb.HistoryReply)
        return [_entry(e) for e in reply.entries]

    def search(self, module, hardware="a100-dgx", *, devices=0, top_k=0,
               objective="time", progress=None) -> SearchOutcome:
        """The strategy search on the daemon's workers; progress(event) gets each
        SearchProgress message as it streams."""
        req = pb.SearchRequest(module=load_module(module, self.distir),
                               hardware=_hardware(hardware), devices=devices, top_k=top_k,
                               objective=pb.SEARCH_MIN_TIME if objective == "time"
                               else pb.SEARCH_MAX_THROUGHPUT)
        for ev in self._stream("Search", req, pb.SearchEvent):
            if ev.HasField("progress"):
                if progress is not None:
                    progress(ev.progress)
            elif ev.HasField("result"):
                r = ev.result
                return SearchOutcome(list(r.top), list(r.pareto),
                                     {c.status: c.count for c in r.counts}, r.cached,
                                     json.loads(r.json))
        raise DistirError(None, "the search stream ended without a result")
