"""Puts plotly.js's basic bundle into static/, at the version the installed plotly (Python) writes for.

    python tools/vendor_plotly.py             # needs npm and the npm registry (npm pack)
    python tools/vendor_plotly.py --check     # only says whether static/ holds that version

The dashboard draws its figures with the basic bundle (bar, scatter and pie traces; see
dashboard/charts.py). Its version must be the plotly.js that the installed plotly (Python)
bundles itself (``plotly.offline.get_plotlyjs_version()``): the figure JSON is written for
it. After changing the plotly pin in requirements.txt, run this and commit static/.
Writes ``static/plotly-basic-<version>.min.js`` and the bundle's licence
(``static/plotly-LICENSE.txt``), removes any other version's bundle, and names the new one
in the shipped nginx configuration's Link header and early script (``docs/hosting/nginx.conf``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from dashboard.charts import BUNDLE_PREFIX, BUNDLE_SUFFIX, STATIC_DIR  # noqa: E402

PACKAGE = "plotly.js-basic-dist-min"
NGINX_CONF = os.path.join(ROOT, "docs", "hosting", "nginx.conf")
BUNDLE_IN_NGINX = re.compile(r"/app/static/plotly-basic-[^>\s\"]+\.min\.js")


def wanted_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return get_plotlyjs_version()


def vendor(version: str) -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("needs npm (apt-get install npm)")
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([npm, "pack", f"{PACKAGE}@{version}", "--silent"], cwd=tmp, capture_output=True,
                             text=True, timeout=300)
        if out.returncode != 0:
            raise SystemExit(f"npm pack {PACKAGE}@{version} failed: {out.stderr.strip()[-500:]}")
        with tarfile.open(os.path.join(tmp, out.stdout.strip().splitlines()[-1])) as tar:
            tar.extractall(tmp, filter="data")
        bundle = os.path.join(tmp, "package", "plotly-basic.min.js")
        with open(bundle, encoding="utf-8") as f:
            head = f.read(200)
        if f"v{version}" not in head:
            raise SystemExit(f"{PACKAGE}@{version} does not say v{version} in its header: {head[:120]!r}")
        for name in os.listdir(STATIC_DIR):
            if name.startswith(BUNDLE_PREFIX) and name.endswith(BUNDLE_SUFFIX):
                os.remove(os.path.join(STATIC_DIR, name))
        target = os.path.join(STATIC_DIR, f"{BUNDLE_PREFIX}{version}{BUNDLE_SUFFIX}")
        shutil.copyfile(bundle, target)
        shutil.copyfile(os.path.join(tmp, "package", "LICENSE"), os.path.join(STATIC_DIR, "plotly-LICENSE.txt"))
    with open(NGINX_CONF, encoding="utf-8") as f:
        conf = f.read()
    with open(NGINX_CONF, "w", encoding="utf-8") as f:
        f.write(BUNDLE_IN_NGINX.sub(f"/app/static/{os.path.basename(target)}", conf))
    return target


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only check; exit 1 if static/ holds another version")
    args = p.parse_args()
    version = wanted_version()
    present = sorted(n for n in os.listdir(STATIC_DIR) if n.startswith(BUNDLE_PREFIX) and n.endswith(BUNDLE_SUFFIX))
    if args.check:
        ok = present == [f"{BUNDLE_PREFIX}{version}{BUNDLE_SUFFIX}"]
        print(f"plotly (Python) writes for plotly.js {version}; static/ holds {present or 'no bundle'}: "
              + ("ok" if ok else "run python tools/vendor_plotly.py"))
        return 0 if ok else 1
    print(f"wrote {os.path.relpath(vendor(version), ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
