"""Serving a team: one build per model however many ask at once, bounded caches, server settings."""

import contextlib
import os
import signal
import threading
import time
import tomllib
from collections import Counter, OrderedDict
from pathlib import Path

import pytest

from calc import profiles
from calc.catalogue import make_spec
from calc.keras import build
from tests.profiles import chain_profile
from tests.tools import wait_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_builds(monkeypatch, tmp_path):
    """Replaces the Keras build by a slow fake that records how many builds overlap.

    The disk cache directory is made unwritable (a path below a plain file), so the
    single flight cannot lean on a second caller finding the first one's file.
    """
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("CALC_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(profiles, "_memory", OrderedDict())
    monkeypatch.setattr(profiles, "BUILDS", Counter())
    state = {"running": 0, "most_at_once": 0}
    guard = threading.Lock()

    def slow_build(spec):
        with guard:
            state["running"] += 1
            state["most_at_once"] = max(state["most_at_once"], state["running"])
        time.sleep(0.2)
        with guard:
            state["running"] -= 1
        return chain_profile()

    monkeypatch.setattr(build, "profile_catalogue_model", slow_build)
    return state


def _in_threads(fn, args_list):
    results = [None] * len(args_list)

    def run(i, args):
        results[i] = fn(*args)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_many_callers_of_one_uncached_model_share_one_build(fake_builds):
    spec = make_spec("ResNet50", 96)  # not a shipped default size
    results = _in_threads(profiles.get_profile, [(spec,)] * 12)
    assert profiles.BUILDS[spec.key] == 1
    assert all(r is results[0] for r in results)


def test_different_models_build_one_at_a_time(fake_builds):
    specs = [make_spec(name, 96) for name in ("ResNet50", "MobileNetV2", "DenseNet121", "Xception")]
    _in_threads(profiles.get_profile, [(s,) for s in specs])
    assert sum(profiles.BUILDS.values()) == 4
    assert fake_builds["most_at_once"] == 1


@pytest.mark.server
def test_a_page_never_waits_for_a_build_it_says_where_the_build_stands_and_shows_the_model_once_built(
        fake_builds, monkeypatch):
    """A shipped size renders at once; a size nobody built is asked of the work service (a build worker, here in
    this process, building with the fake), and the page is drawn at once with where its build stands; once the
    build is done the page shows the model."""
    import calc.service
    from streamlit.testing.v1 import AppTest

    from calc.cluster import worker
    from tests import fake_work

    shipped, new = make_spec("MobileNetV2", 224), make_spec("MobileNetV2", 112)
    assert not profiles.needs_build(shipped) and profiles.needs_build(new)
    work = calc.service.WorkService(fake_work.local_engine, functions={"plan": fake_work.plan, "build": worker.build},
                                    lease_s=30, tick_s=0.05)
    monkeypatch.setattr(calc.service, "_service", work)
    try:
        pages = {}
        for size in ("224", "112"):
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
            at.query_params.update({"model": "MobileNetV2", "image_size": size, "step": "graph"})
            at.run()
            assert not at.exception, [e.stack_trace for e in at.exception]
            pages[size] = at
        assert any(m.label.startswith("Predicted peak") for m in pages["224"].metric)
        waiting = pages["112"]
        assert not waiting.metric and any("is new to this server" in i.value for i in waiting.info)
        assert any("MobileNetV2 at 112x112, built once (weights=None)" in c.value for c in waiting.caption)
        wait_for(lambda: not profiles.needs_build(new), timeout_s=60)
        waiting.run()
        assert any(m.label.startswith("Predicted peak") for m in waiting.metric)
        assert profiles.BUILDS[new.key] == 0 and fake_builds["most_at_once"] == 1  # built on the worker, once
    finally:
        work.shutdown()


def test_profiles_in_memory_are_bounded(fake_builds, monkeypatch):
    monkeypatch.setattr(profiles, "MEMORY_ENTRIES", 3)
    specs = [make_spec("ResNet50", size) for size in (64, 96, 128, 160, 192)]
    for s in specs:
        profiles.get_profile(s)
    assert list(profiles._memory) == [s.key for s in specs[-3:]]
    assert not profiles._key_locks


@pytest.mark.server
def test_visitors_asking_for_the_same_new_size_share_one_build(fake_builds, monkeypatch):
    """Eight sessions ask for one model at a size nobody built: one build, on the build worker (here in this
    process, with the fake), and every page reads the same profile; the dashboard's loader never builds."""
    import streamlit as st

    from calc.cluster import worker
    from calc.service import Want, WorkService
    from dashboard.loaders import load_profile
    from tests import fake_work

    st.cache_resource.clear()
    spec = make_spec("MobileNetV2", 128)
    with pytest.raises(ValueError, match="not built on this server yet"):
        load_profile(spec)
    work = WorkService(fake_work.local_engine, functions={"plan": fake_work.plan, "build": worker.build}, tick_s=0.05)
    try:
        want = Want.build(spec)
        for session in range(8):
            work.ask(f"s{session}", [want])
        wait_for(lambda: all(work.ask(f"s{i}", [want])[want].state == "done" for i in range(8)), timeout_s=60)
    finally:
        work.shutdown()
    results = _in_threads(load_profile, [(spec,)] * 8)
    st.cache_resource.clear()
    assert fake_builds["most_at_once"] == 1 and all(r is results[0] for r in results)
    assert results[0] == chain_profile()


def test_server_config_is_safe_for_a_shared_host():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    server = config["server"]
    assert server["headless"] is True
    assert server["runOnSave"] is False and server["fileWatcherType"] == "none"
    assert server["enableXsrfProtection"] is True and server["enableCORS"] is True
    from calc.uploads import MAX_UPLOAD_BYTES

    assert server["maxUploadSize"] == MAX_UPLOAD_BYTES // 2**20  # the widget refuses what calc would
    assert config["browser"]["gatherUsageStats"] is False
    assert config["runner"]["postScriptGC"] is False  # a full collection per rerun: most of a busy server's CPU
    assert config["client"]["showErrorDetails"] == "none" and config["client"]["toolbarMode"] == "viewer"


# --- the engine's build worker: Keras builds outside the server process ------------------

@pytest.fixture(scope="module")
def builds():
    """This host's own cluster with one build worker (a process under its nanny), as a server starts it."""
    from calc.cluster.engine import Engine

    engine = Engine(None, {"build": 1})
    yield engine
    engine.close()


def _build(engine, spec, key=None):
    from calc.cluster.worker import build as build_task
    from calc.profile_json import profile_from_dict
    from calc.requests import spec_to_dict

    future = engine.submit(build_task, spec_to_dict(spec), key=key or f"build-{spec.key}", kind="build", priority=0)
    return future, lambda: profile_from_dict(future.result(timeout=240)["profile"])


def _pids(engine) -> set[int]:
    """The workers' process ids, of those that answer (one that is being restarted may not)."""
    return {pid for pid in engine.client.run(os.getpid, on_error="return").values() if isinstance(pid, int)}


@pytest.mark.server
def test_the_own_clusters_http_routes_listen_on_loopback_at_a_free_port(builds):
    """Dask's default 8787 may be another cluster's on a shared host (Dask then warns and moves); the
    server's own scheduler asks for a free port on 127.0.0.1, where no visitor reaches it."""
    server = builds.cluster.scheduler.http_server
    assert server is not None
    ports = {sock.getsockname()[:2] for sock in server._sockets.values()}
    assert ports and all(host == "127.0.0.1" and port != 8787 for host, port in ports), ports


@pytest.mark.server
@pytest.mark.keras
def test_the_build_worker_builds_what_an_in_process_build_gives(builds):
    spec = make_spec("MobileNetV2", 96)
    built, here = _build(builds, spec)[1](), build.profile_catalogue_model(spec)
    assert [a for a, b in zip(built.layers, here.layers) if a != b][:1] == []
    assert built == here


@pytest.mark.server
@pytest.mark.keras
def test_the_weights_bound_stays_below_what_a_real_build_holds():
    """``build_bytes_at_least`` refuses builds before a worker starts them, so it must never exceed what one
    takes: VGG16's builds grow with fc1, three copies of it while Keras draws its values. Each build runs in
    a fresh process, which reads its own peak resident size."""
    import subprocess
    import sys

    from calc.catalogue import build_bytes_at_least

    code = ("import resource, sys\nfrom calc.catalogue import make_spec\nfrom calc.keras.build import "
            "profile_catalogue_model\nprofile_catalogue_model(make_spec('VGG16', int(sys.argv[1])))\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    for size in (64, 352):
        done = subprocess.run([sys.executable, "-c", code, str(size)], capture_output=True, text=True, timeout=300,
                              cwd=ROOT, env={**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"})
        assert done.returncode == 0, done.stderr[-2000:]
        assert build_bytes_at_least(make_spec("VGG16", size)) <= int(done.stdout.split()[-1])


@pytest.mark.server
@pytest.mark.keras
def test_a_worker_killed_mid_build_is_restarted_and_the_build_runs_once_more_on_the_fresh_one(builds):
    """Its nanny restarts a worker that dies (past its memory limit, or killed); the build it ran runs again on the
    fresh worker (``allowed-failures``: one), and the next build is served as usual."""
    import signal

    _build(builds, make_spec("MobileNetV2", 64))[1]()  # the worker is up, TensorFlow imported
    before = set(builds.client.run(os.getpid).values())
    future, result = _build(builds, make_spec("ConvNeXtXLarge", 64))  # several seconds
    wait_for(lambda: any(r.key == future.key for r in builds.running().values()), timeout_s=60)
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    assert result().total_params > 0  # ran again on the fresh worker
    assert not set(builds.client.run(os.getpid).values()) & before
    assert _build(builds, make_spec("MobileNetV2", 72))[1]().total_params > 0


@pytest.mark.server
@pytest.mark.keras
def test_a_build_that_leaves_its_worker_grown_restarts_the_worker(builds, monkeypatch):
    """A build worker left above its budget (``CALC_BUILD_GIB``) after a build is replaced before the next one:
    TensorFlow's CPU allocator keeps what a build freed."""
    import calc.service.work
    from calc.service import Want, WorkService, tasks

    monkeypatch.setattr(calc.service.work, "build_budget", lambda: 1)  # every build leaves the worker "too big"
    work = WorkService(lambda: builds, lease_s=30, tick_s=0.1)
    try:
        before = set(builds.client.run(os.getpid).values())
        spec = make_spec("MobileNetV2", 80)
        want = Want.build(spec)
        wait_for(lambda: work.ask("s", [want])[want].state == "done", timeout_s=240)
        wait_for(lambda: len(now := _pids(builds)) == 1 and not now & before, timeout_s=120)
    finally:
        work.shutdown()
    assert tasks.build_budget() > 1  # the setting itself untouched


@pytest.mark.server
def test_a_worker_started_after_a_page_ran_does_not_run_the_page(tmp_path):
    """Streamlit installs each page's module as ``__main__`` and leaves it there; a worker the engine starts
    afterwards (the first, or a nanny's restart) must not run that page before its tasks."""
    import subprocess
    import sys

    page = tmp_path / "page.py"
    page.write_text("import os, pathlib\npathlib.Path(os.environ['MARKS'], str(os.getpid())).touch()\n")
    (tmp_path / "marks").mkdir()
    code = ("import sys, types\nfrom calc.cluster.engine import Engine\n"
            "page = types.ModuleType('__main__'); page.__file__ = sys.argv[1]; sys.modules['__main__'] = page\n"
            "engine = Engine(None, {'plan': 1})\nengine.restart([w.address for w in engine.workers()])\n"
            "print(len(engine.workers()))\nengine.close()\n")
    done = subprocess.run([sys.executable, "-c", code, str(page)], capture_output=True, text=True, timeout=240,
                          cwd=ROOT, env={**os.environ, "MARKS": str(tmp_path / "marks")})
    assert done.returncode == 0 and done.stdout.split()[-1] == "1", done.stderr[-2000:]
    assert list((tmp_path / "marks").iterdir()) == []


@pytest.mark.server
def test_the_dashboard_server_never_imports_tensorflow():
    """A model nobody built at this size: the server asks its work service, whose build worker (a process of its
    own cluster) builds it; the server reads the ledger without importing TensorFlow or Keras."""
    import subprocess
    import sys

    code = ("import sys, time\nimport dashboard.loaders as l\nfrom calc.catalogue import make_spec\n"
            "from calc.service import Want, service\nspec = make_spec('ResNet50', 80)\nwant = Want.build(spec)\n"
            "while service().ask('s', [want])[want].state != 'done':\n    time.sleep(0.2)\n"
            "p = l.get_profile(spec)\nprint(p.total_params, 'tensorflow' in sys.modules, 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["25636712", "False", "False"], out.stderr[-2000:]


# --- "measure now": bounded, one at a time, switchable off ---------------------------

def _inputs(**kw):
    from dashboard.state import Inputs

    return Inputs(**{"model": "MobileNetV2", "image_size": 96, "batch_size": 16, "device": "cpu", **kw})


@pytest.fixture
def small_profile():
    return profiles.get_profile(make_spec("MobileNetV2"))  # shipped: no build


def test_measure_now_is_allowed_within_its_bounds(small_profile, monkeypatch):
    from dashboard import measure_now

    monkeypatch.setenv("CALC_MEASURE_NOW", "on")
    assert measure_now.measure_now_allowed(small_profile, _inputs()) == (True, "")


@pytest.mark.parametrize("inputs, reason", [
    (dict(batch_size=65), "batch ≤ 64"), (dict(image_size=321), "image ≤ 320px"),
    (dict(source="upload"), "calc measure --file"), (dict(num_gpus=2, batch_size=16), "GPUs to 1"),
])
def test_measure_now_refuses_what_could_hold_the_server(small_profile, monkeypatch, inputs, reason):
    from dashboard import measure_now

    monkeypatch.setenv("CALC_MEASURE_NOW", "on")
    allowed, why = measure_now.measure_now_allowed(small_profile, _inputs(**inputs))
    assert not allowed and reason in why


def test_measure_now_refuses_a_step_predicted_past_its_memory_budget(monkeypatch):
    """Within the size bounds a step can still need far more than the host has (EfficientNetB7
    at 320 px, batch 64, is 67.6 GiB on the CPU; one click once drove the child past 6 GB on a
    24 GiB host): EfficientNetB3 at its 300 px, batch 64, is about 20 GiB."""
    from dashboard import measure_now

    monkeypatch.setenv("CALC_MEASURE_NOW", "on")
    monkeypatch.delenv("CALC_MEASURE_GIB", raising=False)
    inputs = _inputs(model="EfficientNetB3", image_size=300, batch_size=64, device="cpu")
    profile = profiles.get_profile(make_spec("EfficientNetB3"))  # shipped: no build
    need = measure_now.predicted_need_bytes(profile, inputs)
    assert need > 16 * 2**30
    allowed, why = measure_now.measure_now_allowed(profile, inputs)
    assert not allowed and f"about {need / 2**30:,.1f} GiB" in why and "budget is 6.0 GiB (CALC_MEASURE_GIB)" in why
    # The operator's budget is the bar: a small step passes it, and fails a budget below its need.
    small = profiles.get_profile(make_spec("MobileNetV2"))
    assert measure_now.measure_now_allowed(small, _inputs(device="cpu")) == (True, "")
    monkeypatch.setenv("CALC_MEASURE_GIB", "0.25")
    allowed, why = measure_now.measure_now_allowed(small, _inputs(device="cpu"))
    assert not allowed and "budget is 0.2 GiB" in why


@pytest.mark.measure
def test_a_measurement_past_its_memory_budget_is_stopped_with_the_figure():
    from calc.types import TrainingConfig
    from calc.workers.measure import MeasurementError, measure_once

    # Python, TensorFlow and Keras alone pass a 256 MiB budget.
    with pytest.raises(MeasurementError, match="passed its memory budget of 0.2 GiB and was stopped"):
        measure_once(make_spec("MobileNetV2", 32), TrainingConfig(batch_size=1), max_rss_bytes=2**28, timeout_s=120)


@pytest.mark.parametrize("has_gpu", [False, True])
def test_measure_now_measures_gpu_kernels_only_on_a_server_with_a_gpu(small_profile, monkeypatch, has_gpu):
    from dashboard import measure_now

    monkeypatch.setenv("CALC_MEASURE_NOW", "on")
    monkeypatch.setattr(measure_now, "server_has_gpu", lambda: has_gpu)
    allowed, why = measure_now.measure_now_allowed(small_profile, _inputs(device="gpu"))
    assert allowed == has_gpu
    assert has_gpu or "set Kernels to CPU" in why
    assert measure_now.measure_now_allowed(small_profile, _inputs(device="cpu")) == (True, "")


@pytest.mark.parametrize("setting", [None, "off", "nonsense"])
def test_measure_now_is_off_unless_the_operator_turns_it_on(small_profile, monkeypatch, setting):
    from dashboard import measure_now

    monkeypatch.delenv("CALC_MEASURE_NOW", raising=False)
    monkeypatch.setattr("streamlit.secrets", {})
    if setting is not None:
        monkeypatch.setenv("CALC_MEASURE_NOW", setting)
    allowed, why = measure_now.measure_now_allowed(small_profile, _inputs())
    assert not allowed and "CALC_MEASURE_NOW=on" in why


def test_measure_now_can_be_turned_on_by_a_secret(small_profile, monkeypatch):
    from dashboard import measure_now

    monkeypatch.delenv("CALC_MEASURE_NOW", raising=False)
    monkeypatch.setattr("streamlit.secrets", {"CALC_MEASURE_NOW": "ON"})
    assert measure_now.measure_now_allowed(small_profile, _inputs()) == (True, "")


def test_only_one_measurement_runs_at_a_time(small_profile, monkeypatch):
    from dashboard import measure_now

    def must_not_run(*args, **kwargs):
        raise AssertionError("a second measurement started")

    monkeypatch.setattr(measure_now, "measure_training_step", must_not_run)
    with measure_now._one_at_a_time:  # another session's measurement is running
        result = measure_now.run_measurement(small_profile, _inputs())
    assert result.error.startswith("Another measurement is running")


# --- the shipped nginx configuration: compression, and a copy nginx accepts ----------

NGINX_CONF = ROOT / "docs" / "hosting" / "nginx.conf"


def _benchmark(name: str):
    """``benchmarks/<name>.py`` as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _first_load_benchmark():
    return _benchmark("first_load")


def _nginx_directives(text: str) -> dict[str, list[str]]:
    """Each directive's arguments (the last occurrence), from nginx's text: comments dropped,
    statements ended by ';', '{' or '}'."""
    import re

    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    statements = (s.split() for s in re.split(r"[;{}]", code))
    return {words[0]: words[1:] for words in statements if words}


def test_the_shipped_nginx_conf_compresses_javascript_css_and_json():
    # Streamlit sends its bundles uncompressed (9.4 MB on a first visit) and leaves compression to the proxy.
    d = _nginx_directives(NGINX_CONF.read_text())
    assert d["gzip"] == ["on"]
    assert {"text/javascript", "application/javascript", "text/css", "application/json",
            "image/svg+xml"} <= set(d["gzip_types"])
    assert d["gzip_proxied"] == ["any"]
    assert 1 <= int(d["gzip_comp_level"][0]) <= 6  # Plotly's chunk: 7 to 9 save under 1 % more than 6, for more CPU
    assert int(d["gzip_min_length"][0]) > 0
    assert "proxy_set_header Upgrade $http_upgrade;" in NGINX_CONF.read_text()  # the websocket still passes


def test_the_shipped_nginx_conf_preloads_the_charts_bundle_and_caches_it():
    import re

    from dashboard.charts import bundle_name

    text = NGINX_CONF.read_text()
    landing = re.search(r"location = / \{(.*?)\}", text, re.S).group(1)
    assert f'add_header Link "</app/static/{bundle_name()}>; rel=preload; as=script" always;' in landing
    # ... and loads it in the page, where dashboard/plotly_chart.js finds it (data-plotly-early).
    early = re.search(r"sub_filter '</head>' '(<script [^']*></script>)</head>';", landing).group(1)
    assert "async data-plotly-early" in early and f'src="/app/static/{bundle_name()}"' in early
    assert "script[data-plotly-early]" in (ROOT / "dashboard" / "plotly_chart.js").read_text()
    assert 'proxy_set_header Accept-Encoding "";' in landing  # sub_filter reads the page uncompressed
    assert set(re.findall(r"/app/static/plotly-basic-[^>\s\"]+", text)) == {f"/app/static/{bundle_name()}"}
    static = re.search(r"location /app/static/ \{(.*?)\}", text, re.S).group(1)
    assert "max-age=31536000" in static and "proxy_pass http://keras_memory_dashboard;" in static


def test_the_benchmark_measures_the_shipped_nginx_conf_with_only_its_ports_changed(tmp_path):
    shipped = NGINX_CONF.read_text()
    main = _first_load_benchmark().nginx_config(shipped, 18080, 18501, str(tmp_path))
    copy = (tmp_path / "server.conf").read_text()
    changed = [(a, b) for a, b in zip(shipped.splitlines(), copy.splitlines()) if a != b]
    assert len(copy.splitlines()) == len(shipped.splitlines())
    assert [b.split() for _, b in changed] == [["server", "127.0.0.1:18501;"], ["listen", "127.0.0.1:18080;"]]
    assert f"include {tmp_path}/server.conf;" in Path(main).read_text()


@pytest.mark.parametrize("sidebar", [False, True])
def test_the_floor_app_draws_the_two_charts_and_with_sidebar_the_dashboards_sidebar(tmp_path, monkeypatch, sidebar):
    import json

    from streamlit.testing.v1 import AppTest

    floor = _benchmark("floor_app")
    figures = {key: {"data": [{"type": "bar", "x": [key], "y": [1]}], "layout": {}} for key in floor.CHARTS}
    monkeypatch.setattr(floor, "estimator_figures", lambda: figures)  # the Estimator's own run is not the subject
    floor.write(str(tmp_path), sidebar=sidebar)
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(str(tmp_path / "app.py"), default_timeout=60).run()
    assert not at.exception
    drawn = {c.proto.id.rsplit("-", 1)[-1]: json.loads(c.proto.json) for c in at.get("bidi_component")}
    assert {k: json.loads(drawn[k]["figure"])["data"] for k in floor.CHARTS} == {k: f["data"] for k, f in figures.items()}
    assert at.get("download_button")[0].proto.id.endswith(floor.PAGE_END)
    keys = {w.key for kind in ("selectbox", "number_input", "radio", "checkbox", "slider") for w in getattr(at.sidebar, kind)}
    assert keys >= ({"lang", "model", "batch_size", "optimizer", "gpu", "margin"} if sidebar else set())
    assert bool(keys) == sidebar


def test_the_benchmark_compares_each_target_with_the_same_way_of_serving_the_first_baseline():
    reference = _first_load_benchmark().reference
    results = dict.fromkeys(["baseline", "baseline2", "direct", "nginx", "baseline nginx", "baseline2 nginx",
                             "nginx (other.conf)", "baseline nginx (other.conf)"])
    assert {t: reference(t, results, None) for t in results} == {
        "baseline": None, "baseline2": "baseline", "direct": "baseline", "nginx": "baseline nginx",
        "baseline nginx": None, "baseline2 nginx": "baseline nginx",
        "nginx (other.conf)": "baseline nginx (other.conf)", "baseline nginx (other.conf)": None}
    # Without a baseline checkout, several nginx configurations are compared with the first.
    assert reference("nginx (other.conf)", {"nginx": 1, "nginx (other.conf)": 1}, "nginx") == "nginx"
    assert reference("nginx", {"nginx": 1, "nginx (other.conf)": 1}, "nginx") is None


@pytest.mark.server
def test_nginx_accepts_the_shipped_conf(tmp_path):
    bench = _first_load_benchmark()
    nginx = bench.nginx_binary()
    if nginx is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is not installed (.ci/run installs it)")
        pytest.skip("nginx is not installed")
    main = bench.nginx_config(NGINX_CONF.read_text(), 18080, 18501, str(tmp_path))
    bench.check_nginx_config(nginx, main, str(tmp_path))  # raises with nginx's message


def test_the_first_load_benchmark_shows_its_help():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "first_load.py"), "--help"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "--visits" in out.stdout and "--only" in out.stdout and "--nginx-conf" in out.stdout
    assert "--baseline-app" in out.stdout
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "batch_redraw.py"), "--changes", "1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--changes must be 2..50" in out.stderr  # refused before any server starts


# --- a server stopped while it compiles leaves no process behind -------------------------

def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (from /proc: each process's parent)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry)] = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().rsplit(")", 1)[1][:3]}


@pytest.mark.keras
@pytest.mark.server
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_server_stopped_while_it_builds_and_compiles_leaves_no_process_of_its_own(tmp_path, monkeypatch, signum):
    """A visitor's tab asks for a size nothing ships (a build and a compile); once both workers of the server's own
    cluster run, the server is stopped as a service manager stops it (SIGTERM, or SIGKILL after its timeout): 15 s
    later none of the processes it started is left (the workers' nannies live in the server; each worker is ended by
    the kernel when its parent ends, ``calc.cluster.worker.follow_nanny``)."""
    import asyncio
    import time

    from calc import xla

    if xla.unavailable_reason() is not None:
        pytest.skip(xla.unavailable_reason())
    load_test, visitors = _benchmark("load_test"), _benchmark("xla_visitors")
    monkeypatch.setenv("CALC_XLA_COMPILES", "on")
    port = load_test.free_port()
    server = load_test.start_server(port, str(tmp_path))
    try:
        load_test.wait_healthy(server, port)
        tab = visitors.Visitor(f"ws://127.0.0.1:{port}/_stcore/stream",
                               "model=MobileNetV2&image_size=96&batch_size=7&optimizer=sgd&gpu=t4")

        async def until_working() -> set[int]:
            await tab.connect()
            await tab.open(time.monotonic() + 120)
            deadline = time.monotonic() + 120
            while len(_descendants(server.pid)) < 2 and time.monotonic() < deadline:
                await tab.until(lambda: False, time.monotonic() + 0.5)
            await tab.until(lambda: False, time.monotonic() + 8)  # the workers import Keras and start
            await tab.close()
            return _descendants(server.pid)

        children = asyncio.run(until_working())
        assert len(children) >= 2, "the server's cluster did not start"
        os.kill(server.pid, signum)
        wait_for(lambda: server.poll() is not None and not _alive(children), timeout_s=15)
        assert server.poll() is not None and not _alive(children)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)


# --- who a visitor is, for the work service's places per address -------------------------

def test_the_client_is_the_peer_and_behind_the_named_proxy_the_address_that_proxy_appended(monkeypatch):
    """``X-Forwarded-For`` is believed only from the proxy ``CALC_TRUSTED_PROXY`` names: a local user who sends
    it straight to the server (a loopback peer too) cannot take a fresh address for every tab."""
    from types import SimpleNamespace

    from dashboard import xla_step

    def seen_from(peer, forwarded=None):
        headers = {"X-Forwarded-For": forwarded} if forwarded else {}
        monkeypatch.setattr(xla_step, "st", SimpleNamespace(context=SimpleNamespace(ip_address=peer, headers=headers)))
        return xla_step.client_address()

    monkeypatch.delenv("CALC_TRUSTED_PROXY", raising=False)
    assert seen_from("127.0.0.1", "6.6.6.6") == "127.0.0.1"  # no proxy named: the header is nobody's word
    assert seen_from("203.0.113.5", "1.2.3.4") == "203.0.113.5"
    monkeypatch.setenv("CALC_TRUSTED_PROXY", "10.0.0.3, 127.0.0.1")
    assert seen_from("127.0.0.1", "6.6.6.6, 198.51.100.7") == "198.51.100.7"  # the visitor's own claim comes first
    assert seen_from("10.0.0.3", "198.51.100.8") == "198.51.100.8"
    assert seen_from("203.0.113.5", "1.2.3.4") == "203.0.113.5"  # a peer that is not the proxy: its header ignored
    assert seen_from("127.0.0.1") == "127.0.0.1"
    assert seen_from(None) == ""


@pytest.mark.keras
@pytest.mark.server
def test_a_small_class_through_a_cluster_of_separate_processes():
    """The class storm's small version through a scheduler and two workers started as docs/HOSTING.md starts
    them (``python -m calc.cluster``): two visitors open new configurations at once, one leaves after the first
    page, a newcomer comes; every page is drawn at once, every plan of those who stayed finishes, nothing they
    wanted is stopped, and no page or log has an error. (The whole class is ``benchmarks/class_storm.py``'s.)"""
    import json
    import subprocess
    import sys

    from calc import xla

    if xla.unavailable_reason() is not None:
        pytest.skip(xla.unavailable_reason())
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "class_storm.py"), "--cluster", "processes",
                           "--small", "--solo", "0", "--newcomer-after", "5", "--timeout", "900"],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT)
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert done.returncode == 0 and result["errors"] == 0, done.stdout[-3000:]
    summary = result["summary"]
    assert summary["stayed"] == 2 and summary["plans_finished"] == 2  # the one who stayed and the newcomer
    assert summary["first_page_max_s"] < 15 and result["stopped_while_wanted"] == 0
