"""Load test of the real dashboard server, over Streamlit's own websocket protocol.

    python benchmarks/load_test.py                 # catalogue tour, then 20 users for 60 s
    python benchmarks/load_test.py --users 2 --duration 8 --no-tour
    python benchmarks/load_test.py --tour-rounds 2 # visit the catalogue twice: does memory keep growing?
    python benchmarks/load_test.py --no-tour --same-model 0 --hostile  # then a baseline and a hostile visitor

Starts ``streamlit run app.py`` on 127.0.0.1 (a free port, an empty profile cache of its
own) and drives it as browsers do: each client opens ``/_stcore/stream`` (subprotocol
``streamlit``), sends ``BackMsg.rerun_script`` with the query string, the page hash, the
state of every sidebar widget and the hashes of the large messages it caches, and reads
the ``ForwardMsg``s back (resolving ``ref_hash`` ones from its cache).

1. Catalogue tour (``--no-tour`` skips it): one session sets the image size to 96 px (no
   model's default, so no shipped profile serves it), then selects every catalogue model
   in turn: one real Keras build on the server's build worker each, the page rerun until it draws
   its curve, as its progress fragment has it. Round k uses 96 + 16k px.
2. Same model at once (``--same-model N``, 0 skips): one session builds EfficientNetB3 at
   two new sizes (the second is one build's time), then N sessions ask for a third size
   at the same moment; with single flight they all finish in about one build's time.
3. Load: N users, started over ~2 s, each changing one input (batch size, optimizer,
   precision or GPU) every 1-2 s (seeded), waiting for each rerun to end; on the XLA step
   (the default page) or, with ``--step graph``, on the graph-executor walk, which
   compiles nothing.
4. With ``--hostile``, two more phases of the same load, new sessions each, each phase its own
   sequence of changes of the same kinds: the baseline, then the same beside one more
   visitor, the server as warm in both (the first phase paid the cold start). The visitor,
   one request at a time, without pause: uploads files as ``st.file_uploader`` does (a
   ``file_urls_request`` over the websocket, an HTTP PUT with the XSRF cookie, a rerun
   carrying the file's state), each round a 1 KiB ``.keras`` of Input(40000) -> Dense(40000)
   (6.4 GB of weights were it built) and, every other round, one of ``--upload-mib`` MiB (a
   stored entry of zeros, no config.json), both made in memory; pastes a 2,000-layer
   ``model.summary()`` (a new one each time); asks for a catalogue model at a new size (a
   build) and for XLA's plan at a new batch (a compile). That phase lasts ``--duration`` and
   until the visitor has done ``--hostile-rounds`` full rounds (default 1; at most 240 s
   more), so that every kind of request meets the users. Reported: the other users'
   latencies in both phases and the ratio of their p95s, the server's peak memory beside
   the visitor, and the visitor's own messages (what the server said to each upload), which
   are not counted as errors.

Measured: ms from sending a change to the run's first message (``new_session``), to the
curve chart's delta and to ``script_finished`` (p50/p95/max); the server's resident memory
(VmRSS/VmHWM, children included) after the first page, after each tour round and after
the load; its CPU seconds during the load; the tour's time and RSS per model. Errors:
exception elements, ``st.error`` alerts (not the red "Does not fit" verdict), a run
that does not finish successfully or has no curve chart, a change the server did not
apply, a closed websocket, a rerun over 30 s (120 s in the tour), a traceback in the
server log.
Prints a report and one ``RESULT {json}`` line; exits 1 on any error. Bounded: at most
50 users, 300 s of load (a phase) plus 180 s, and with ``--hostile`` two more phases plus 240 s
(one upload's read), 120 s per tour model, 3 tour rounds, uploads under the server's 200 MiB;
loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import http.client
import importlib.metadata as md
import io
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
import zipfile
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import websockets
from streamlit.proto.Alert_pb2 import Alert
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.Common_pb2 import FileURLs
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.NumberInput_pb2 import NumberInput
from streamlit.proto.WidgetStates_pb2 import WidgetState

from calc.catalogue import CATALOGUE
from calc.gpus import GPU_PRESETS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAX_USERS, MAX_DURATION_S, MAX_TOUR_ROUNDS = 50, 300, 3
RERUN_TIMEOUT_S, TOUR_MODEL_TIMEOUT_S, TOUR_SIZE = 30.0, 120.0, 96
UPLOAD_TIMEOUT_S = 240.0  # the reader's own limit is 180 s (calc.uploads.TIMEOUT_S), plus its start
HOSTILE_OVERRUN_S = 240.0  # the phase beside the hostile visitor waits this long past --duration for its rounds
FIRST_QUERY = "model=ResNet50&image_size=224&batch_size=32&optimizer=adam&precision=float32&gpu=t4"
WIDGETS = {"selectbox", "radio", "number_input", "slider", "text_area", "file_uploader"}
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
        self.page_name = ""  # a page's url path ("compare") for the first rerun; "" the default page
        self.headers: dict[str, str] = {}  # sent with the websocket's handshake (X-Forwarded-For behind a proxy)
        self.expects_chart = True  # a run without the Estimator's curve chart is an error
        self.states: dict[str, WidgetState] = {}  # user key -> the state a browser would send
        self.cache: collections.OrderedDict[str, ForwardMsg] = collections.OrderedDict()
        self.session_id, self.xsrf = "", None  # for uploads: the AppSession's id, the XSRF cookie
        self.uploaders: dict[str, str] = {}  # user key -> widget id of each file uploader drawn

    async def connect(self) -> None:
        self.ws = await websockets.connect(self.url, subprotocols=["streamlit"], max_size=None, open_timeout=30,
                                           additional_headers=self.headers or None)

    def set(self, key: str, value: int | str) -> None:
        if isinstance(value, int):
            self.states[key].int_value = value
        else:
            self.states[key].string_value = value

    def query_value(self, key: str) -> str | None:
        return parse_qs(self.query).get(key, [None])[0]

    def _track(self, kind: str, el) -> str:
        """Keeps a widget's value as drawn (the app always sets it, so set_value is on); returns its key."""
        key = el.id.split("-", 2)[2]  # "$$ID-<md5 hex>-<user key>"
        if kind == "file_uploader":  # no value until a file is uploaded (``upload``)
            self.uploaders[key] = el.id
            return key
        state = WidgetState(id=el.id)
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
        self.states[key] = state
        return key

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
        if not self.page_hash and self.page_name:
            cs.page_name = self.page_name
        cs.widget_states.widgets.extend(self.states.values())
        cs.cached_message_hashes.extend(self.cache)
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        out, run_id, drawn = {"start_ms": None, "chart_ms": None, "finished_ms": None, "errors": []}, None, set()
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
                self.session_id = m.new_session.initialize.session_id or self.session_id
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
                    drawn.add(self._track(ek, el))
                elif ek == "bidi_component" and el.id.endswith("-curve_chart") and out["chart_ms"] is None:
                    out["chart_ms"] = ms
            elif kind == "script_finished" and m.metadata.run.script_run_id in ("", run_id):
                out["finished_ms"] = ms
                # The browser forgets the state of a widget the run did not draw (removeInactive):
                # a file uploader that goes away takes its file with it, on the page, not on the server.
                self.states = {k: v for k, v in self.states.items() if k in drawn}
                self.uploaders = {k: v for k, v in self.uploaders.items() if k in drawn}
                if m.script_finished != ForwardMsg.FINISHED_SUCCESSFULLY:
                    out["errors"].append(f"script_finished {ForwardMsg.ScriptFinishedStatus.Name(m.script_finished)}")
                elif out["chart_ms"] is None and self.expects_chart:
                    out["errors"].append("the run ended without the curve chart")
                return out

    async def upload(self, key: str, name: str, data: bytes, timeout: float) -> dict:
        """Uploads a file into the file uploader ``key`` as ``st.file_uploader`` does in the
        browser, then reruns with it; ``rerun``'s answer with ``put_ms`` added.

        The browser replaces a single file uploader's file by deleting the old one first
        (``DELETE`` its ``delete_url``), asks the session for URLs (``BackMsg.file_urls_request``,
        answered by ``ForwardMsg.file_urls_response``), PUTs the file as multipart form data
        (field and file name: the file's name) with the ``_streamlit_xsrf`` cookie and the same
        value in ``X-Xsrftoken``, and reruns with the widget's ``file_uploader_state_value``.
        """
        if key not in self.uploaders:
            raise RuntimeError(f"no file uploader {key!r} on the page")
        if self.xsrf is None:  # the browser has it from the health check it makes before connecting
            self.xsrf = await asyncio.to_thread(self._xsrf_cookie)
        old = self.states.get(key)
        for info in old.file_uploader_state_value.uploaded_file_info if old is not None else ():
            if info.file_urls.delete_url:
                await asyncio.to_thread(self._http, "DELETE", info.file_urls.delete_url, [], "")
        msg, request_id = BackMsg(), str(uuid.uuid4())
        msg.file_urls_request.request_id, msg.file_urls_request.session_id = request_id, self.session_id
        msg.file_urls_request.file_names.append(name)
        await self.ws.send(msg.SerializeToString())
        urls = await self._file_urls(request_id, timeout)
        boundary = uuid.uuid4().hex
        head = (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n").encode()
        t0 = time.perf_counter()
        await asyncio.to_thread(self._http, "PUT", urls.upload_url, [head, data, f"\r\n--{boundary}--\r\n".encode()],
                                f"multipart/form-data; boundary={boundary}")
        put_ms = (time.perf_counter() - t0) * 1e3
        state = WidgetState(id=self.uploaders[key])
        state.file_uploader_state_value.uploaded_file_info.add(file_id=urls.file_id, name=name, size=len(data),
                                                               file_urls=urls)
        self.states[key] = state
        out = await self.rerun(timeout)
        out["put_ms"] = put_ms
        return out

    async def _file_urls(self, request_id: str, timeout: float) -> FileURLs:
        deadline = time.perf_counter() + timeout
        while True:
            data = await asyncio.wait_for(self.ws.recv(), max(0.0, deadline - time.perf_counter()))
            m = self._receive(data)
            if m is not None and m.WhichOneof("type") == "file_urls_response":
                r = m.file_urls_response
                if r.response_id == request_id:
                    if r.error_msg or len(r.file_urls) != 1:
                        raise OSError(f"file_urls_response: {r.error_msg or len(r.file_urls)}")
                    return r.file_urls[0]

    def _origin(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return parts.hostname, parts.port

    def _xsrf_cookie(self) -> str:
        conn = http.client.HTTPConnection(*self._origin(), timeout=30)
        try:
            conn.request("GET", "/_stcore/health")
            resp = conn.getresponse()
            resp.read()
            for header in resp.headers.get_all("Set-Cookie") or []:
                name, _, value = header.split(";", 1)[0].partition("=")
                if name.strip() == "_streamlit_xsrf":
                    return value
        finally:
            conn.close()
        raise OSError("the server set no _streamlit_xsrf cookie (is server.enableXsrfProtection on?)")

    def _http(self, method: str, path: str, body: list[bytes], content_type: str) -> None:
        """One request to the server with the browser's XSRF cookie and header; the body sent in parts."""
        conn = http.client.HTTPConnection(*self._origin(), timeout=UPLOAD_TIMEOUT_S)
        try:
            conn.putrequest(method, path)
            for header, value in (("Cookie", f"_streamlit_xsrf={self.xsrf}"), ("X-Xsrftoken", self.xsrf),
                                  ("Content-Length", str(sum(map(len, body))))):
                conn.putheader(header, value)
            if content_type:
                conn.putheader("Content-Type", content_type)
            conn.endheaders()
            for part in body:
                conn.send(part)
            resp = conn.getresponse()
            text = resp.read()[:300]
            if resp.status not in (200, 204):
                raise OSError(f"{method} {path} answered {resp.status}: {text.decode(errors='replace')}")
        finally:
            conn.close()


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
                r = await drawn(c, TOUR_MODEL_TIMEOUT_S)
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


async def drawn(c: Client, timeout: float) -> dict:
    """Reruns until the page draws its curve, as the page's progress fragment has it rerun once the model's build
    (a build worker's, in the background) has landed; ``rerun``'s answer with ``finished_ms`` from the first."""
    c.expects_chart, t0 = False, time.perf_counter()
    try:
        r = await c.rerun(timeout)
        errors = list(r["errors"])
        while r["chart_ms"] is None and time.perf_counter() - t0 < timeout:
            await asyncio.sleep(0.5)
            r = await c.rerun(timeout)
            errors += r["errors"]
        if r["chart_ms"] is None:
            errors.append(f"no curve chart within {timeout:.0f} s")
        return {**r, "finished_ms": (time.perf_counter() - t0) * 1e3, "errors": errors}
    finally:
        c.expects_chart = True


def until(t: float) -> Callable[[], bool]:
    return lambda: time.monotonic() >= t


async def user(i: int, url: str, args, over: Callable[[], bool], record, latencies: dict, phase: int = 0) -> None:
    """Changes one input every 1-2 s until ``over()``; each phase its own sequence of changes."""
    rng, c = random.Random(args.seed * 1000 + 100 * phase + i), Client(url, f"{FIRST_QUERY}&step={args.step}")
    await asyncio.sleep(2.0 * i / args.users)
    try:
        await c.connect()
        record(f"user {i} first page", await c.rerun(RERUN_TIMEOUT_S))
        while not over():
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


UPLOAD_KEY, HUGE_NAME, LARGE_NAME = "upload_file", "huge_dense.keras", "large.keras"
HUGE_UNITS = 40_000
SOURCES = {"upload": "my .keras / .h5 file", "summary": "pasted model.summary()", "catalogue": "Keras applications"}


def huge_model_keras(units: int = HUGE_UNITS) -> bytes:
    """A ``.keras`` of Input(units) -> Dense(units) without weights, its config as Keras 3.15
    writes it: about 1 KiB that would build units**2 float32 weights (6.4 GB at 40,000)."""
    def obj(module: str, class_name: str, config: dict, **more) -> dict:
        return {"module": module, "class_name": class_name, "config": config, "registered_name": None, **more}

    tensor = {"class_name": "__keras_tensor__",
              "config": {"shape": [None, units], "dtype": "float32", "keras_history": ["input_layer", 0, 0]}}
    dense = {"name": "dense", "trainable": True,
             "dtype": obj("keras", "DTypePolicy", {"name": "float32"}), "units": units, "activation": "linear",
             "use_bias": True, "kernel_initializer": obj("keras.initializers", "GlorotUniform", {"seed": None}),
             "bias_initializer": obj("keras.initializers", "Zeros", {}), "kernel_regularizer": None,
             "bias_regularizer": None, "kernel_constraint": None, "bias_constraint": None}
    layers = [
        obj("keras.layers", "InputLayer", {"batch_shape": [None, units], "dtype": "float32", "sparse": False,
                                           "ragged": False, "name": "input_layer", "optional": False},
            name="input_layer", inbound_nodes=[]),
        obj("keras.layers", "Dense", dense, build_config={"input_shape": [None, units]}, name="dense",
            inbound_nodes=[{"args": [tensor], "kwargs": {}}])]
    model = obj("keras.src.models.functional", "Functional",
                {"name": "functional", "trainable": True, "layers": layers, "input_layers": ["input_layer", 0, 0],
                 "output_layers": ["dense", 0, 0]}, build_config={"input_shape": None}, compile_config={})
    model["registered_name"] = "Functional"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1", "date_saved": "2026-01-01@00:00:00"}))
        z.writestr("config.json", json.dumps(model))
    return out.getvalue()


def large_upload(mib: int) -> bytes:
    """A zip of one stored entry, ``mib`` MiB of zeros: the size of a large model's file."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("model.weights.h5", bytes(mib * 2**20))
    return out.getvalue()


async def hostile_visitor(url: str, over: Callable[[], bool], seed: int, files: dict[str, bytes], done: dict,
                          log: list[str], said: dict[str, dict]) -> dict:
    """Uploads, pastes, builds and compiles, one request at a time, until ``over()`` (looked at
    before each step); counts in ``done`` the rounds and steps done, returns the seconds the steps
    took, by kind. ``said``: per file, the message its first upload got, the seconds of each PUT
    and of each rerun that read it."""
    rng, c = random.Random(seed), Client(url)
    took = {kind: 0.0 for kind in done if kind != "rounds"}
    sizes = iter(range(112, 8192, 8))  # new sizes: each one a build in the build worker

    async def switch(source: str) -> None:  # the run stops at an st.info until the new input is given
        if c.states["source"].string_value != SOURCES[source]:
            c.set("source", SOURCES[source])
            await c.rerun(TOUR_MODEL_TIMEOUT_S)

    async def upload(name: str) -> None:
        await switch("upload")
        r = await c.upload(UPLOAD_KEY, name, files[name], UPLOAD_TIMEOUT_S)
        log.extend(r["errors"])
        text = next((e for e in r["errors"] if e.startswith("st.error: ")), "(read, no message)")
        seen = said.setdefault(name, {"reply": re.sub(r"\\(.)", r"\1", text)[:300],  # without plain()'s escapes
                                      "put_s": [], "rerun_s": []})
        seen["put_s"].append(round(r["put_ms"] / 1e3, 2))
        seen["rerun_s"].append(round(r["finished_ms"] / 1e3, 2))

    async def paste() -> None:
        await switch("summary")
        c.set("summary_text", hostile_summary(rng.randrange(8, 4096)))
        log.extend((await c.rerun(TOUR_MODEL_TIMEOUT_S))["errors"])

    async def build() -> None:
        await switch("catalogue")
        c.set("model", rng.choice(["ResNet50", "MobileNetV2", "EfficientNetB0", "DenseNet121"]))
        c.set("image_size", next(sizes))
        log.extend((await c.rerun(TOUR_MODEL_TIMEOUT_S))["errors"])

    async def compile_request() -> None:
        if "step" in c.states:
            c.set("step", "XLA (Keras's default on a GPU, jit_compile=True)")
        c.set("batch_size", rng.randrange(1, 512))
        log.extend((await c.rerun(TOUR_MODEL_TIMEOUT_S))["errors"])

    def steps(k: int):
        if k % 2 == 0:
            yield "uploads", lambda: upload(LARGE_NAME)
        yield "uploads", lambda: upload(HUGE_NAME)
        yield "pastes", paste
        yield "builds", build
        yield "compile_requests", compile_request

    async def rounds() -> None:
        await c.connect()
        await c.rerun(TOUR_MODEL_TIMEOUT_S)
        for k in itertools.count():
            for kind, step in steps(k):
                if over():
                    return
                t = time.monotonic()
                await step()
                done[kind] += 1
                took[kind] += time.monotonic() - t
            done["rounds"] += 1

    try:
        await rounds()
    except (OSError, TimeoutError, websockets.ConnectionClosed) as exc:
        log.append(f"{type(exc).__name__}: {exc}")
    finally:
        if c.ws is not None:
            await c.ws.close()
    return {k: round(v, 1) for k, v in took.items()}


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
            r = await drawn(one, TOUR_MODEL_TIMEOUT_S)
            record(f"one session builds {SAME_MODEL} at {size}", r)
            build_ms = r["finished_ms"]
        for c in clients:
            c.set("model", SAME_MODEL)
            c.set("image_size", 144)
        runs = await asyncio.gather(*(drawn(c, TOUR_MODEL_TIMEOUT_S) for c in clients))
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
    cpu0, t0 = cpu_s(pid), time.monotonic()
    await asyncio.gather(*(user(i, url, args, until(t0 + args.duration), record, latencies) for i in range(args.users)))
    result["server_cpu_load"] = {"cpu_s": round(cpu_s(pid) - cpu0, 1), "wall_s": round(time.monotonic() - t0, 1)}
    result["rss_mib"]["after_load"] = rss_mib(pid)
    if args.hostile:
        await hostile_phase(url, args, pid, result, record)


def stats(latencies: dict[str, list]) -> dict:
    return {k: {"p50": pct(v, 0.5), "p95": pct(v, 0.95), "max": pct(v, 1.0)} for k, v in latencies.items()}


async def hostile_phase(url: str, args, pid: int, result: dict, record) -> None:
    """The load again without the hostile visitor (the baseline: the server as warm as it will be
    beside the visitor), then the load beside the visitor; the other users' latencies in both, and
    the server's memory (its children included) sampled every 0.25 s beside the visitor."""
    alone: dict[str, list] = {"start": [], "chart": [], "finished": []}
    cpu0, t0 = cpu_s(pid), time.monotonic()
    await asyncio.gather(*(user(i, url, args, until(t0 + args.duration), record, alone, phase=1)
                           for i in range(args.users)))
    baseline = {"changes": len(alone["finished"]), "latency_ms": stats(alone),
                "server_cpu_s": round(cpu_s(pid) - cpu0, 1), "wall_s": round(time.monotonic() - t0, 1)}
    beside: dict[str, list] = {"start": [], "chart": [], "finished": []}
    log: list[str] = []
    said: dict[str, dict] = {}
    files = {HUGE_NAME: huge_model_keras(), LARGE_NAME: large_upload(args.upload_mib)}
    before = rss_mib(pid)
    peak = {"rss": 0.0, "server_rss": 0.0}
    done = {"rounds": 0, "uploads": 0, "pastes": 0, "builds": 0, "compile_requests": 0}
    t0 = time.monotonic()
    stop_at, visiting = t0 + args.duration, True

    def over() -> bool:  # --duration and the visitor's rounds, or the overrun's end
        now = time.monotonic()
        return now >= stop_at + HOSTILE_OVERRUN_S or (
            now >= stop_at and (done["rounds"] >= args.hostile_rounds or not visiting))

    async def watch_memory() -> None:
        while visiting or not over():
            mem = rss_mib(pid)
            peak["rss"], peak["server_rss"] = max(peak["rss"], mem["rss"]), max(peak["server_rss"], mem["server_rss"])
            await asyncio.sleep(0.25)

    async def visitor() -> dict:
        nonlocal visiting
        try:
            return await hostile_visitor(url, over, args.seed, files, done, log, said)
        finally:
            visiting = False

    cpu0 = cpu_s(pid)
    users = (user(i, url, args, over, record, beside, phase=2) for i in range(args.users))
    took, *_ = await asyncio.gather(visitor(), watch_memory(), *users)
    p95, base = pct(beside["finished"], 0.95), baseline["latency_ms"]["finished"]["p95"]
    after = rss_mib(pid)
    result["hostile"] = {
        "baseline": baseline, "server_cpu_s": round(cpu_s(pid) - cpu0, 1),
        "visitor": done, "visitor_s": took, "wall_s": round(time.monotonic() - t0, 1),
        "uploads": {name: {"bytes": len(files[name]), **seen} for name, seen in said.items()},
        "visitor_messages": len(log), "visitor_message_samples": [m[:300] for m in log[:3]],
        "changes": len(beside["finished"]), "latency_ms": stats(beside),
        "peak_rss_mib_with_children": round(peak["rss"], 1), "peak_server_rss_mib": round(peak["server_rss"], 1),
        "rss_mib_before": before, "rss_mib_after": after,
        "p95_ratio": round(p95 / base, 2) if base and p95 else None}


def start_server(port: int, workdir: str, root: str = ROOT, log_name: str = "server.log") -> subprocess.Popen:
    """``streamlit run app.py`` in ``root`` (this checkout, or another one to compare with)."""
    env = dict(os.environ, CALC_CACHE_DIR=os.path.join(workdir, "profiles"))
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]
    log = open(os.path.join(workdir, log_name), "wb")
    # A process group of its own: Ctrl-C reaches only us, and we end the whole group.
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ok(proc: subprocess.Popen, url: str, timeout: float = 120.0, *, what: str = "server",
            poll_s: float = 0.5) -> None:
    """Until ``url`` answers "ok" (Streamlit's health check, also through a proxy); raises if
    ``proc`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.read().strip() == b"ok":
                    return
        time.sleep(poll_s)
    raise RuntimeError(f"{url} did not answer ok in {timeout:.0f} s")


def wait_healthy(proc: subprocess.Popen, port: int, timeout: float = 120.0) -> None:
    wait_ok(proc, f"http://127.0.0.1:{port}/_stcore/health", timeout)


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
        b, bl = h["baseline"], h["baseline"]["latency_ms"]["finished"]
        print(f"  the load again, the baseline: {b['changes']} changes, change -> script_finished p50 {bl['p50']} ms  "
              f"p95 {bl['p95']} ms  max {bl['max']} ms; server CPU {b['server_cpu_s']} s in {b['wall_s']} s")
        print(f"  beside a hostile visitor ({h['visitor']}, seconds {h['visitor_s']}): {h['changes']} changes, "
              f"change -> script_finished p50 {hl['p50']} ms  p95 {hl['p95']} ms  max {hl['max']} ms; "
              f"p95 {h['p95_ratio']}x the baseline; server CPU {h['server_cpu_s']} s in {h['wall_s']} s")
        print(f"    memory during it: server with children peaked at {h['peak_rss_mib_with_children']} MiB "
              f"(sampled every 0.25 s), the server alone at {h['peak_server_rss_mib']} MiB (its VmHWM "
              f"{h['rss_mib_before']['server_hwm']} -> {h['rss_mib_after']['server_hwm']} MiB); "
              f"{h['visitor_messages']} messages to the visitor")
        for name, u in h["uploads"].items():
            print(f"    upload {name} ({u['bytes']:,} bytes), PUT {u['put_s']} s, its rerun {u['rerun_s']} s: "
                  f"{u['reply']}")
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
                   help="then the load again beside a visitor who uploads, pastes, builds and compiles without pause")
    p.add_argument("--hostile-rounds", type=int, default=1, choices=range(0, 11), metavar="N",
                   help="the phase beside the hostile visitor lasts --duration and until the visitor has done N "
                        "full rounds (at most 240 s more; 0: --duration alone)")
    p.add_argument("--upload-mib", type=int, default=150, choices=range(1, 191), metavar="MIB",
                   help="the hostile visitor's large upload, every other round (the server takes up to 200 MiB)")
    p.add_argument("--host", default="127.0.0.1", help="loopback only (the server listens on 127.0.0.1)")
    args = p.parse_args()
    if args.host not in ("127.0.0.1", "localhost"):
        p.error("loopback only: --host must be 127.0.0.1 or localhost")
    if not (1 <= args.users <= MAX_USERS and 0 < args.duration <= MAX_DURATION_S):
        p.error(f"--users must be 1..{MAX_USERS} and --duration in (0, {MAX_DURATION_S}]")
    wall_limit = (args.duration * (3 if args.hostile else 1) + 180
                  + (HOSTILE_OVERRUN_S + UPLOAD_TIMEOUT_S if args.hostile else 0)
                  + (args.tour_rounds * len(CATALOGUE) * TOUR_MODEL_TIMEOUT_S if args.tour else 0))
    port = free_port()
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
                  latency_ms=stats(latencies),
                  errors=len(errors), error_samples=errors[:5], cpu_count=os.cpu_count(),
                  versions={n: md.version(n) for n in ("streamlit", "tensorflow", "keras", "websockets")})
    report(args, result, errors)
    print("RESULT " + json.dumps(result), flush=True)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
