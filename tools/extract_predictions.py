"""Extracts the predictions made before measuring from the commit messages into a CSV.

Holdout cases were predicted, committed, and only then measured; the predictions were
written into the commit messages, in a dozen layouts. This reads every commit message
that says it holds predictions made before measuring and writes one row per case:

    python tools/extract_predictions.py > validation/predictions.csv

Columns: ``case`` as written in the message (not normalised: some messages abbreviate
the case, e.g. ``NASNetMobile-96 b8 adagrad last_10_layers`` or ``'ResNet50', 96, 4,
'adam', precision='mixed_float16'``), ``predicted_mib`` as written, ``predicted_bytes``
where the message gives bytes (else empty), ``step`` (``graph``: every such prediction
is of the graph-executor walk), ``commit`` and ``date`` (the commit's author date),
``also`` (an alternative prediction written beside it, as written: another engine or a
candidate policy that was compared, e.g. ``warmed policy 615.3``).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys

# A message holds predictions made before measuring when it says so in one of these ways.
BEFORE = re.compile(r"before measuring|before any of these cases was measured|before any measurement"
                    r"|before any was measured|made before measuring|Predictions at this commit"
                    r"|predicted before|predictions before", re.I)
NUMBER = r"(\d[\d,]*\.\d+|\d+)"

# Each layout, as one regular expression over the whole message; the first that matches wins.
LAYOUTS: list[tuple[str, re.Pattern[str]]] = [
    # plain_cnn.keras b32 adam float32    206,531,840 bytes (  197.0 MiB)
    ("bytes", re.compile(r"^(\S.*?\S)\s+([\d,]{6,}) bytes \(\s*([\d.]+) MiB\)", re.M)),
    # CASE   floor   287,844,096 (  274.5 MiB)  no floor   287,844,096 (  274.5 MiB)
    ("floor bytes", re.compile(r"^(\S.*?\S)\s+floor\s+([\d,]+) \(\s*([\d.]+) MiB\)\s+(no floor\s+[\d,]+ \(\s*[\d.]+ MiB\))",
                               re.M)),
    # CASE   engine   1086.1  floor   1086.1 MiB
    ("engine floor", re.compile(r"^(\S.*?\S)\s+engine\s+([\d.]+)\s+(floor\s+[\d.]+) MiB", re.M)),
    # CASE  walk (engine at 1229ce5)    856.7 MiB  simulation   1007.5 MiB
    ("walk simulation", re.compile(r"(\S+ b\d+ [^|]*?\S)\s+walk \(engine at \w+\)\s+([\d.]+) MiB\s+(simulation\s+[\d.]+) MiB")),
    # _case('ResNet152', 160, 6, ...),  # predicted 410.6 MiB
    ("_case comment", re.compile(r"_case\((.*?)\),\s*# predicted ([\d.]+) MiB")),
    # 'NASNetMobile', 128, 32, 'rmsprop', precision='mixed_bfloat16' -> 457.7 MiB
    ("case arguments", re.compile(r"('[A-Za-z0-9]+', .*?) -> ([\d.]+) MiB")),
    # ResNet101-128x128x3-top1000 b2 sgd momentum mixed_float16 -> 655.7 MiB (without BRANCH_TEMPORARIES 577.5)
    ("arrow MiB", re.compile(r"^(\S.*?) -> ([\d.]+) MiB(?: \((.*?)\))?$", re.M)),
    # CASE: 223.9 MiB [218.7]   /   CASE: 252.8 | sim 258.4   /   CASE: 1768.9 MiB [1471.4], peak ...
    ("colon lines", re.compile(r"^(\S[^:\n]*\S): ([\d.]+)(?: MiB)?(?: \[([\d.]+)\]| \| (sim [\d.]+))?(?:,.*)?$", re.M)),
    # vit_tiny.keras b64 adam float32    1143.8 MiB  backward layer_normalization_16
    ("MiB and peak", re.compile(r"^(\S.*?\S)\s{2,}([\d.]+) MiB\s+(?:backward|forward)", re.M)),
    # ConvNeXtLarge-160 b4 adamw f32                 5467.4
    ("table", re.compile(r"^(\S.* b\d+ .*?\S)\s+([\d.]+)$", re.M)),
]
# "in MiB: CASE: 561.9 (592.4);CASE: ..." and "(MiB): CASE -> 184.5; ..." and
# "Engine / walk alone, MiB: CASE 897.5 / 897.5; ..." and "(MiB): CASE 409.6, CASE 96.2, ...".
LIST_HEAD = re.compile(r"(?:in MiB|\(MiB\)|alone, MiB):[ \t]*(\S.*)", re.S)
# The sixth and fifth holdouts: case ids in one line, "CASE   2402.4 MiB CASE ...".
INLINE = re.compile(r"([A-Za-z0-9]+-\d+x\d+x\d+-(?:top|head)\d+ b\d+ [a-z0-9_ ]*?)\s+([\d.]+) MiB")


def list_items(text: str) -> list[tuple[str, str, str]]:
    """The items of a "MiB:" list: (case, MiB, also)."""
    head = LIST_HEAD.search(text)
    if not head:
        return []
    body = head.group(1).split("\n\n")[0].replace("\n", " ")
    body = re.split(r"\.\s+(?=[A-Za-z])", body)[0]  # the list ends with its sentence
    # Items are separated by ";", or by "," where no item has a ":" of its own; a ";"-group
    # of ","-items ("imdb_bilstm b32 adam 59.5, b128 rmsprop 90.6; text_gru ...") is split too.
    parts = [p for group in body.split(";") for p in (group.split(",") if ":" not in group else [group])]
    items = []
    model = ""
    for part in parts:
        part = part.strip().rstrip(".")
        if not part:
            continue
        m = (re.fullmatch(r"(.+?): ([\d.]+)(?: \((.*)\))?", part)
             or re.fullmatch(r"(.+?) -> ([\d.]+)", part)
             or re.fullmatch(r"(.+?) ([\d.]+) / ([\d.]+)", part)
             or re.fullmatch(r"(.+?) ([\d.]+)", part))
        if not m:
            continue
        case, mib = m.group(1), m.group(2)
        also = m.group(3) if m.lastindex and m.lastindex >= 3 and m.group(3) else ""
        if also and re.fullmatch(r"[\d.]+", also):
            also = f"walk alone {also}" if " / " in part else f"({also})"
        # "imdb_bilstm b32 adam 59.5, b128 rmsprop 90.6": the model carries over.
        if case.startswith("b") and case.split()[0][1:].isdigit() and model:
            case = f"{model} {case}"
        model = case.split()[0]
        items.append((case.strip(), mib, also))
    return items


def extract(message: str) -> tuple[str, list[tuple[str, str, str, str]]]:
    """(layout, [(case, MiB, bytes, also)]) of one commit message."""
    items = list_items(message)
    if items:
        return "list", [(c, mib, "", also) for c, mib, also in items]
    inline = INLINE.findall(message)
    if len(inline) >= 3:
        return "inline", [(c.strip(), mib, "", "") for c, mib in inline]
    for name, pattern in LAYOUTS:
        found = pattern.findall(message)
        if not found:
            continue
        rows = []
        for groups in found:
            if name in ("bytes", "floor bytes"):
                case, raw_bytes, mib = groups[0], groups[1], groups[2]
                rows.append((case, mib, raw_bytes.replace(",", ""), groups[3] if len(groups) > 3 else ""))
            else:
                case, mib, *rest = groups
                also = next((r for r in rest if r), "")
                if name == "colon lines" and re.fullmatch(r"[\d.]+", also):
                    also = f"[{also}]"
                rows.append((case.strip(), mib, "", also))
        return name, rows
    return "", []


def commits() -> list[tuple[str, str, str]]:
    """(hash, ISO date, message) of every commit in the repository."""
    out = subprocess.run(["git", "log", "--all", "--format=%H%x00%aI%x00%B%x01"], capture_output=True, text=True,
                         check=True).stdout
    result = []
    for record in out.split("\x01"):
        record = record.strip("\n")
        if record:
            sha, date, message = record.split("\x00", 2)
            result.append((sha, date, message))
    return result


def main() -> int:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["case", "predicted_mib", "predicted_bytes", "step", "commit", "date", "also", "layout"])
    for sha, date, message in reversed(commits()):
        subject = message.split("\n", 1)[0]
        # A "measured" commit quotes a prediction made earlier; the prediction's own commit has it.
        if not BEFORE.search(message) or re.search(r"(?<!not yet )\bmeasured\b", subject.split("(")[0]):
            continue
        layout, rows = extract(message)
        for case, mib, raw_bytes, also in rows:
            writer.writerow([case, mib, raw_bytes, "graph", sha[:12], date[:10], " ".join(also.split()), layout])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
