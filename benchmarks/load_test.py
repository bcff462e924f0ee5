"""Load test of the real dashboard server, over Streamlit's own websocket protocol.

    python benchmarks/load_test.py                 # catalogue tour, then 20 users for 60 s
    python benchmarks/load_test.py --users 2 --duration 8 --no-tour
    python benchmarks/load_test.py --tour-rounds 2 # visit the catalogue twice: does memory keep growing?
    python benchmarks/load_test.py --no-tour --same-model 0 --hostile  # the load again, beside a hostile visitor

Starts ``streamlit run app.py`` on 127.0.0.1 (a free port, an empty profile cache of its
own) and drives it as browsers do: each client opens ``/_stcore/stream`` (subprotocol
``streamlit``), sends ``BackMsg.rerun_script`` with the query string, the page hash, the
state of every sidebar widget and the hashes of the large messages it caches, and reads
the ``ForwardMsg``s back (resolving ``ref_hash`` ones from its cache).

1. Catalogue tour (``--no-tour`` skips it): one session sets the image size to 96 px (no
   model's default, so no shipped profile serves it), then selects every catalogue model
   in turn: one real Keras build in the server each. Round k uses 96 + 16k px.
2. Same model at once (``--same-model N``, 0 skips): one session builds EfficientNetB3 at
   two new sizes (the second is one build's time), then N sessions ask for a third size
   at the same moment; with single flight they all finish in about one build's time.
3. Load: N users, started over ~2 s, each changing one input (batch size, optimizer,
   precision or GPU) every 1-2 s (seeded), waiting for each rerun to end; on the XLA step
   (the default page) or, with ``--step graph``, on the graph-executor walk, which
   compiles nothing.
4. With ``--hostile``, the same load again (new sessions, same seed) while one more
   visitor, without pause, pastes a 2,000-layer ``model.summary()`` (a new one each time),
   asks for a catalogue model at a new size (a build) and for XLA's plan at a new batch
   (a compile). The other users' latencies are reported for both phases, and the ratio of
   their p95s; the hostile visitor's own messages are reported, not counted as errors.
   Uploads are not part of it (they go through Streamlit's HTTP upload endpoint).

Measured: ms from sending a change to the run's first message (``new_session``), to the
curve chart's delta and to ``script_finished`` (p50/p95/max); the server's resident memory
(VmRSS/VmHWM, children included) after the first page, after each tour round and after
the load; its CPU seconds during the load; the tour's time and RSS per model. Errors:
exception elements, ``st.error`` alerts (not the red "Does not fit" verdict), a run
that does not finish successfully or has no curve chart, a change the server did not
apply, a closed websocket, a rerun over 30 s (120 s in the tour), a traceback in the
server log.
Prints a report and one ``RESULT {json}`` line; exits 1 on any error. Bounded: at most
50 users, 300 s of load plus 180 s, 120 s per tour model, 3 tour rounds; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib.metadata as md
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from urllib.parse import parse_qs

import websockets
from streamlit.proto.Alert_pb2 import Alert
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.NumberInput_pb2 import NumberInput
from streamlit.proto.WidgetStates_pb2 import WidgetState

from calc.catalogue import CATALOGUE
from calc.gpus import GPU_PRESETS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAX_USERS, MAX_DURATION_S, MAX_TOUR_ROUNDS = 50, 300, 3
RERUN_TIMEOUT_S, TOUR_MODEL_TIMEOUT_S, TOUR_SIZE = 30.0, 120.0, 96
FIRST_QUERY = "model=ResNet50&image_size=224&batch_size=32&optimizer=adam&precision=float32&gpu=t4"
WIDGETS = {"selectbox", "radio", "number_input", "slider", "text_area"}
VERDICT = "Does not fit:"  # the estimator's red verdict is a result, not an error
CHANGES = {  # input -> (values, what its widget state holds: a selectbox sends the option's label)
    "batch_size": (range(1, 513), int),
    "optimizer": (["adam", "sgd", "adamw", "rmsprop"], str),
    "precision": (["float32", "mixed_float16", "mixed_bfloat16"], str),
    "gpu": (["t4", "a100-40", "rtx-4090", "h100-80"], lambda key: GPU_PRESETS[key].name),
}


class Client:
    """One browser tab: a session, its widgets' states and its cache of large messages."""

    refs_resolved = 0  # messages the server sent as a ref_hash to one a client had cached

    def __init__(self, url: str, query: str = FIRST_QUERY):
        self.url, self.query, self.page_hash, self.ws = url, query, "", None
        self.states: dict[str, WidgetState] = {}  # user key -> the state a browser would send
        self.cache: collections.OrderedDict[str, ForwardMsg] = collections.OrderedDict()

    async def connect(self) -> None:
        self.ws = await websockets.connect(self.url, subprotocols=["streamlit"], max_size=None, open_timeout=30)

    def set(self, key: str, value: int | str) -> None:
        if isinstance(value, int):
            self.states[key].int_value = value
        else:
            self.states[key].string_value = value

    def query_value(self, key: str) -> str | None:
        return parse_qs(self.query).get(key, [None])[0]

    def _track(self, kind: str, el) -> None:
        """Keeps a widget's value as drawn (the app always sets it, so set_value is on)."""
        state = WidgetState(id=el.id)  # "$$ID-<md5 hex>-<user key>"
        if kind in ("selectbox", "radio"):
            state.string_value = el.raw_value  # the formatted option, not an index
        elif kind == "text_area":
            state.string_value = el.value
        elif kind == "number_input" and el.data_type == NumberInput.INT:
            state.int_value = int(el.value)
        elif kind == "number_input":
            state.double_value = el.value
        else:  # slider
            state.double_array_value.data.extend(el.value)
        self.states[el.id.split("-", 2)[2]] = state

    def _receive(self, data: bytes) -> ForwardMsg | None:
        m = ForwardMsg.FromString(data)
        if m.WhichOneof("type") == "ref_hash":  # sent for a message we listed in cached_message_hashes
            if m.ref_hash not in self.cache:
                return None
            full = ForwardMsg()
            full.CopyFrom(self.cache[m.ref_hash])
            full.metadata.CopyFrom(m.metadata)
            self.cache.move_to_end(m.ref_hash)
            Client.refs_resolved += 1
            return full
        if m.metadata.cacheable and m.hash:  # new_element deltas >= global.minCachedMessageSize (10 kB)
            self.cache[m.hash] = m
            while len(self.cache) > 32:
                self.cache.popitem(last=False)
        return m

    async def rerun(self, timeout: float) -> dict:
        """Sends a rerun like a browser; returns ms to new_session, curve chart, script_finished, and errors."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string, cs.page_script_hash = self.query, self.page_hash
        cs.widget_states.widgets.extend(self.states.values())
        cs.cached_message_hashes.extend(self.cache)
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        out, run_id = {"start_ms": None, "chart_ms": None, "finished_ms": None, "errors": []}, None
        while True:
            left = t0 + timeout - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"rerun took over {timeout:.0f} s")
            data = await asyncio.wait_for(self.ws.recv(), left)
            ms = (time.perf_counter() - t0) * 1e3
            m = self._receive(data)
            if m is None:
                out["errors"].append("a ref_hash to a message this client does not have")
                continue
            kind = m.WhichOneof("type")
            if kind == "new_session":
                run_id, out["start_ms"] = m.metadata.run.script_run_id, ms
            elif kind == "navigation":
                self.page_hash = m.navigation.page_script_hash
            elif kind == "page_info_changed":
                self.query = m.page_info_changed.query_string
            elif kind == "delta" and m.delta.WhichOneof("type") == "new_element":
                ek = m.delta.new_element.WhichOneof("type")
                el = getattr(m.delta.new_element, ek)
                if ek == "exception":
                    out["errors"].append(f"exception {el.type}: {el.message}\n" + "\n".join(el.stack_trace))
                elif ek == "alert" and el.format == Alert.ERROR and not el.body.startswith(VERDICT):
                    out["errors"].append(f"st.error: {el.body}")
                elif ek in WIDGETS:
                    self._track(ek, el)
                elif ek == "plotly_chart" and el.id.endswith("-curve_chart") and out["chart_ms"] is None:
                    out["chart_ms"] = ms
            elif kind == "script_finished" and m.metadata.run.script_run_id in ("", run_id):
                out["finished_ms"] = ms
                if m.script_finished != ForwardMsg.FINISHED_SUCCESSFULLY:
                    out["errors"].append(f"script_finished {ForwardMsg.ScriptFinishedStatus.Name(m.script_finished)}")
                elif out["chart_ms"] is None:
                    out["errors"].append("the run ended without the curve chart")
                return out


def rss_mib(pid: int) -> dict:
    """VmRSS and VmHWM in MiB: of the server process alone, and with its descendants
    (the Keras build worker) added."""
    total, own, pids = {"VmRSS": 0.0, "VmHWM": 0.0}, None, [pid]
    while pids:
        p = pids.pop()
        with contextlib.suppress(OSError):
            for line in open(f"/proc/{p}/status"):
                name, _, value = line.partition(":")
                if name in total:
                    total[name] += int(value.split()[0]) / 1024
            for task in os.listdir(f"/proc/{p}/task"):
                pids += [int(c) for c in open(f"/proc/{p}/task/{task}/children").read().split()]
        if own is None:
            own = dict(total)
    own = own or total
    return {"rss": round(total["VmRSS"], 1), "hwm": round(total["VmHWM"], 1),
            "server_rss": round(own["VmRSS"], 1), "server_hwm": round(own["VmHWM"], 1)}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list, q: float) -> float | None:
    """Nearest-rank percentile."""
    values = sorted(v for v in values if v is not None)
    return round(values[max(0, math.ceil(q * len(values)) - 1)], 1) if values else None


async def tour(url: str, rounds: int, pid: int, record) -> dict:
    """One session visits every catalogue model at a size that is no model's default."""
    c, current = Client(url), "ResNet50"
    info = {"models": len(CATALOGUE), "per_model_s": {}, "per_model_rss_mib": {}, "rounds": []}
    await c.connect()
    try:
        record("tour first page", await c.rerun(RERUN_TIMEOUT_S))
        for k in range(rounds):
            size, t = TOUR_SIZE + 16 * k, time.monotonic()
            steps = [(current, "image_size", size)] + [(m, "model", m) for m in CATALOGUE if m != current]
            for model, key, value in steps:
                assert CATALOGUE[model].min_size <= size != CATALOGUE[model].default_size
                c.set(key, value)
                r = await c.rerun(TOUR_MODEL_TIMEOUT_S)
                if (c.query_value("model"), c.query_value("image_size")) != (model, str(size)):
                    r["errors"].append(f"server shows {c.query_value('model')} at {c.query_value('image_size')}")
                record(f"tour {model} at {size}", r)
                mem = rss_mib(pid)
                rss = mem["rss"]
                if k == 0:
                    info["per_model_s"][model] = round(r["finished_ms"] / 1e3, 2)
                    info["per_model_rss_mib"][model] = rss
                print(f"  tour {k + 1} {model:<18} {size} px {r['finished_ms'] / 1e3:6.2f} s, RSS server "
                      f"{mem['server_rss']:7.1f} MiB, with worker {rss:7.1f} MiB",
                      flush=True)
            current = model
            info["rounds"].append({"image_size": size, "total_s": round(time.monotonic() - t, 1),
                                   "rss_mib": rss_mib(pid)})
    finally:
        await c.ws.close()
    return info


async def user(i: int, url: str, args, stop_at: float, record, latencies: dict) -> None:
    rng, c = random.Random(args.seed * 1000 + i), Client(url, f"{FIRST_QUERY}&step={args.step}")
    await asyncio.sleep(2.0 * i / args.users)
    try:
        await c.connect()
        record(f"user {i} first page", await c.rerun(RERUN_TIMEOUT_S))
        while time.monotonic() < stop_at:
            next_at = time.monotonic() + rng.uniform(1.0, 2.0)
            key = rng.choice(list(CHANGES))
            value = rng.choice(CHANGES[key][0])
            c.set(key, CHANGES[key][1](value))
            r = await c.rerun(RERUN_TIMEOUT_S)
            if c.query_value(key) != str(value):
                r["errors"].append(f"{key}={value} sent, the server shows {c.query_value(key)}")
            record(f"user {i} {key}={value}", r)
            for k in latencies:
                latencies[k].append(r[f"{k}_ms"])
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    except (OSError, TimeoutError, websockets.ConnectionClosed) as exc:
        record(f"user {i}", {"errors": [f"{type(exc).__name__}: {exc}"]})
    finally:
        if c.ws is not None:
            await c.ws.close()


HOSTILE_LAYERS = 2000  # the most a pasted summary may have


def hostile_summary(width: int) -> str:
    """A Keras 2 style summary of a chain of Dense layers: the largest paste the server reads."""
    rows = ["Layer (type)                Output Shape              Param #", "=" * 64,
            f"input_1 (InputLayer)        [(None, {width})]          0"]
    rows += [f"dense_{i} (Dense)            (None, {width})          {width * width + width}"
             for i in range(HOSTILE_LAYERS - 1)]
    return "\n".join(rows + ["=" * 64, f"Total params: {(HOSTILE_LAYERS - 1) * (width * width + width):,}"])


async def hostile_visitor(url: str, stop_at: float, seed: int, log: list[str]) -> dict:
    """Pastes, builds and compiles, one after another, until ``stop_at``; returns counts."""
    rng, c = random.Random(seed), Client(url)
    done = {"pastes": 0, "builds": 0, "compile_requests": 0}
    sizes = iter(range(112, 8192, 8))  # new sizes: each one a build in the build worker
    try:
        await c.connect()
        await c.rerun(TOUR_MODEL_TIMEOUT_S)
        while time.monotonic() < stop_at:
            c.set("source", "pasted model.summary()")
            await c.rerun(TOUR_MODEL_TIMEOUT_S)
            if "summary_text" in c.states:
                c.set("summary_text", hostile_summary(rng.randrange(8, 4096)))
                r = await c.rerun(TOUR_MODEL_TIMEOUT_S)
                log.extend(r["errors"])
                done["pastes"] += 1
            c.set("source", "Keras applications")
            await c.rerun(TOUR_MODEL_TIMEOUT_S)
            c.set("model", rng.choice(["ResNet50", "MobileNetV2", "EfficientNetB0", "DenseNet121"]))
            c.set("image_size", next(sizes))
            log.extend((await c.rerun(TOUR_MODEL_TIMEOUT_S))["errors"])
            done["builds"] += 1
            if "step" in c.states:
                c.set("step", "XLA (Keras's default on a GPU, jit_compile=True)")
            c.set("batch_size", rng.randrange(1, 512))
            log.extend((await c.rerun(TOUR_MODEL_TIMEOUT_S))["errors"])
            done["compile_requests"] += 1
    except (OSError, TimeoutError, websockets.ConnectionClosed) as exc:
        log.append(f"{type(exc).__name__}: {exc}")
    finally:
        if c.ws is not None:
            await c.ws.close()
    return done


SAME_MODEL = "EfficientNetB3"  # default 300 px: the sizes below are built, never shipped


async def same_model_at_once(url: str, n: int, record) -> dict:
    """n sessions ask for one uncached model at the same moment: with single flight one
    build serves them all, so they finish in about one build's time, not n of them."""
    clients = [Client(url) for _ in range(n)]
    try:
        for c in clients:
            await c.connect()
            record("same-model first page", await c.rerun(TOUR_MODEL_TIMEOUT_S))
        one, build_ms = clients[0], 0.0
        for size in (112, 128):  # the first may pay the build worker's TensorFlow import
            one.set("model", SAME_MODEL)
            one.set("image_size", size)
            r = await one.rerun(TOUR_MODEL_TIMEOUT_S)
            record(f"one session builds {SAME_MODEL} at {size}", r)
            build_ms = r["finished_ms"]
        for c in clients:
            c.set("model", SAME_MODEL)
            c.set("image_size", 144)
        runs = await asyncio.gather(*(c.rerun(TOUR_MODEL_TIMEOUT_S) for c in clients))
        for r in runs:
            record(f"{n} sessions ask for {SAME_MODEL} at 144 at once", r)
        slowest = max(r["finished_ms"] for r in runs)
        return {"sessions": n, "model": SAME_MODEL, "one_build_ms": round(build_ms, 1),
                "all_sessions_ms": round(slowest, 1), "ratio": round(slowest / build_ms, 2)}
    finally:
        for c in clients:
            if c.ws is not None:
                await c.ws.close()


async def run(args, port: int, pid: int, result: dict, latencies: dict, record) -> None:
    url = f"ws://127.0.0.1:{port}/_stcore/stream"
    first = Client(url)  # the first page: the imports are paid before anything is timed
    await first.connect()
    r = await first.rerun(TOUR_MODEL_TIMEOUT_S)
    record("first page", r)
    await first.ws.close()
    result["first_page_ms"], result["rss_mib"]["after_first_page"] = round(r["finished_ms"], 1), rss_mib(pid)
    if args.tour:
        result["tour"] = await tour(url, args.tour_rounds, pid, record)
        result["rss_mib"]["after_tour"] = result["tour"]["rounds"][-1]["rss_mib"]
    if args.same_model:
        result["same_model"] = await same_model_at_once(url, args.same_model, record)
    cpu0, t0, stop_at = cpu_s(pid), time.monotonic(), time.monotonic() + args.duration
    await asyncio.gather(*(user(i, url, args, stop_at, record, latencies) for i in range(args.users)))
    result["server_cpu_load"] = {"cpu_s": round(cpu_s(pid) - cpu0, 1), "wall_s": round(time.monotonic() - t0, 1)}
    result["rss_mib"]["after_load"] = rss_mib(pid)
    if args.hostile:
        await hostile_phase(url, args, pid, result, record, pct(latencies["finished"], 0.95))


async def hostile_phase(url: str, args, pid: int, result: dict, record, base: float | None) -> None:
    """The load again, beside one hostile visitor; the other users' latencies for the ratio."""
    beside: dict[str, list] = {"start": [], "chart": [], "finished": []}
    log: list[str] = []
    peak = {"rss": 0.0}
    stop_at = time.monotonic() + args.duration

    async def watch_memory() -> None:
        while time.monotonic() < stop_at:
            peak["rss"] = max(peak["rss"], rss_mib(pid)["rss"])
            await asyncio.sleep(0.5)

    users = (user(i, url, args, stop_at, record, beside) for i in range(args.users))
    done, *_ = await asyncio.gather(hostile_visitor(url, stop_at, args.seed, log), watch_memory(), *users)
    p95 = pct(beside["finished"], 0.95)
    result["hostile"] = {
        "visitor": done, "visitor_messages": len(log), "visitor_message_samples": [m[:300] for m in log[:3]],
        "changes": len(beside["finished"]),
        "latency_ms": {k: {"p50": pct(v, 0.5), "p95": pct(v, 0.95), "max": pct(v, 1.0)} for k, v in beside.items()},
        "peak_rss_mib_with_children": round(peak["rss"], 1), "rss_mib_after": rss_mib(pid),
        "p95_ratio": round(p95 / base, 2) if base and p95 else None}


def start_server(port: int, workdir: str) -> subprocess.Popen:
    env = dict(os.environ, CALC_CACHE_DIR=os.path.join(workdir, "profiles"))
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    log = open(os.path.join(workdir, "server.log"), "wb")
    # A process group of its own: Ctrl-C reaches only us, and we end the whole group.
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(proc: subprocess.Popen, port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.read().strip() == b"ok":
                    return
        time.sleep(0.5)
    raise RuntimeError(f"server not healthy after {timeout:.0f} s")


def _interrupted(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def report(args, result: dict, errors: list[str]) -> None:
    lat, cpu = result["latency_ms"], result.get("server_cpu_load")
    print(f"\n{args.users} users x {args.duration:g} s: {result['changes']} input changes, {len(errors)} errors "
          f"({result['cpu_count']} CPUs; {result['ref_hash_messages']} messages came as ref_hash)")
    for k, label in (("start", "new_session"), ("chart", "curve chart"), ("finished", "script_finished")):
        print(f"  change -> {label:<16} p50 {lat[k]['p50']} ms  p95 {lat[k]['p95']} ms  max {lat[k]['max']} ms")
    if cpu:
        print(f"  server CPU during the load: {cpu['cpu_s']} s in {cpu['wall_s']} s")
    if "same_model" in result:
        sm = result["same_model"]
        print(f"  {sm['sessions']} sessions asking for {sm['model']} at once: all done in {sm['all_sessions_ms']} ms; "
              f"one build alone {sm['one_build_ms']} ms (ratio {sm['ratio']})")
    for rnd in result.get("tour", {}).get("rounds", []):
        print(f"  catalogue tour: {result['tour']['models']} models at {rnd['image_size']} px in {rnd['total_s']} s")
    for phase, v in result["rss_mib"].items():
        print(f"  memory {phase:<17} server RSS {v['server_rss']:8.1f} MiB (HWM {v['server_hwm']:8.1f}); "
              f"with build worker RSS {v['rss']:8.1f} MiB")
    if "hostile" in result:
        h, hl = result["hostile"], result["hostile"]["latency_ms"]["finished"]
        print(f"  beside a hostile visitor ({h['visitor']}): {h['changes']} changes, change -> script_finished "
              f"p50 {hl['p50']} ms  p95 {hl['p95']} ms  max {hl['max']} ms; p95 {h['p95_ratio']}x the load alone; "
              f"server with children peaked at {h['peak_rss_mib_with_children']} MiB; "
              f"{h['visitor_messages']} messages to the visitor")
    for e in errors[:5]:
        print("  ERROR", e[:800])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=20)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    p.add_argument("--tour", action=argparse.BooleanOptionalAction, default=True, help="visit every model first")
    p.add_argument("--tour-rounds", type=int, default=1, choices=range(1, MAX_TOUR_ROUNDS + 1))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--same-model", type=int, default=8, choices=range(0, MAX_USERS + 1), metavar="N",
                   help="N sessions ask for one uncached model at once (0 skips)")
    p.add_argument("--step", choices=["xla", "graph"], default="xla",
                   help="the users' training step: xla (the default page: a batch change may queue an XLA "
                        "compile) or graph (the walk alone, no compiles)")
    p.add_argument("--hostile", action="store_true",
                   help="then the load again beside a visitor who pastes, builds and compiles without pause")
    p.add_argument("--host", default="127.0.0.1", help="loopback only (the server listens on 127.0.0.1)")
    args = p.parse_args()
    if args.host not in ("127.0.0.1", "localhost"):
        p.error("loopback only: --host must be 127.0.0.1 or localhost")
    if not (1 <= args.users <= MAX_USERS and 0 < args.duration <= MAX_DURATION_S):
        p.error(f"--users must be 1..{MAX_USERS} and --duration in (0, {MAX_DURATION_S}]")
    wall_limit = args.duration * (2 if args.hostile else 1) + 180 + (args.tour_rounds * len(CATALOGUE) * TOUR_MODEL_TIMEOUT_S if args.tour else 0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="calc-load-")
    result: dict = {"users": args.users, "duration_s": args.duration, "rss_mib": {}}
    latencies: dict[str, list] = {"start": [], "chart": [], "finished": []}
    errors: list[str] = []

    def record(what: str, r: dict) -> None:
        errors.extend(f"{what}: {e}" for e in r["errors"])

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, _interrupted)
    proc = start_server(port, workdir)
    try:
        wait_healthy(proc, port)
        print(f"server pid {proc.pid} healthy on 127.0.0.1:{port}", flush=True)
        asyncio.run(asyncio.wait_for(run(args, port, proc.pid, result, latencies, record), wall_limit))
    except (Exception, KeyboardInterrupt) as exc:  # reported; the server is ended all the same
        errors.append(f"aborted: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log = open(os.path.join(workdir, "server.log"), errors="replace").read()
        shutil.rmtree(workdir, ignore_errors=True)
    errors += [f"server log: Traceback{chunk[:2000]}" for chunk in log.split("Traceback")[1:]]
    result.update(changes=len(latencies["finished"]), ref_hash_messages=Client.refs_resolved,
                  latency_ms={k: {"p50": pct(v, 0.5), "p95": pct(v, 0.95), "max": pct(v, 1.0)}
                              for k, v in latencies.items()},
                  errors=len(errors), error_samples=errors[:5], cpu_count=os.cpu_count(),
                  versions={n: md.version(n) for n in ("streamlit", "tensorflow", "keras", "websockets")})
    report(args, result, errors)
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
