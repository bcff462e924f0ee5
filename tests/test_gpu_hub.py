"""KerasHub steps predicted for a GPU before they are measured (``tools/measure_gpu_hub.py``, set ``hub_gpu``).

Pure: reads JSON, compiles nothing, imports no Keras or JAX.
"""

import json

import pytest

from calc.hub import HubSpec
from calc.requests import config_from_dict, plan_spec_from_dict
from calc.validation.planned import load_planned
from tests.tools import load_tool

tool = load_tool("measure_gpu_hub")
GIB = 2**30


def test_the_hub_gpu_set_is_on_record_for_every_case_the_tool_measures():
    entries = tool.planned_entries()
    assert [e["case"] for e in entries] == [tool.case_id(*s) for s in tool.setups()]
    for entry in entries:
        assert entry["set"] == "hub_gpu" and entry["gpu"] == "h200"
        assert entry["drawn_by"].startswith("measure_gpu_hub.py predict")
        spec, config = plan_spec_from_dict(entry["spec"]), config_from_dict(entry["config"])
        assert isinstance(spec, HubSpec) and tool.case_id(spec, config) == entry["case"]
        assert config.device.value == "gpu" and config.num_gpus == 1
        predicted = entry["predicted_peak_bytes"]
        assert isinstance(predicted, int) and 0 < predicted < 100 * GIB  # fits an H200 (141 GB)
        assert sum(v for k, v in entry["plan"].items() if k != "trainable_weights") == predicted
        assert entry["attention"] in ("cudnn", "xla", "none")


def test_the_set_covers_lora_and_full_text_and_vision_and_both_attentions():
    specs = [plan_spec_from_dict(e["spec"]) for e in tool.planned_entries()]
    assert {s.lora_rank > 0 for s in specs} == {True, False}
    assert {s.model.text for s in specs} == {True, False}
    assert len({s.model.family for s in specs if s.model.text}) >= 2
    attention = {e["case"].split("-")[0]: e["attention"] for e in tool.planned_entries()}
    assert attention["llama3.2_1b"] == attention["qwen2.5_0.5b_en"] == "cudnn"
    assert attention["gemma2_2b_en"] == "xla"  # its logit soft cap keeps Keras from the fused op


def test_the_other_sets_are_kept_when_the_hub_set_is_written(tmp_path):
    path = tmp_path / "planned.json"
    other = {"case": "ResNet50-224x224x3-top1000 b32 adam float32", "set": "gpu_xla", "predicted_peak_bytes": 5}
    path.write_text(json.dumps({"cases": [other, {"case": "old", "set": "hub_gpu", "predicted_peak_bytes": 1}]}))
    tool.save_planned([{"case": "new", "set": "hub_gpu", "predicted_peak_bytes": 2}], path)
    assert load_planned(path) == [other, {"case": "new", "set": "hub_gpu", "predicted_peak_bytes": 2}]


def test_compare_gives_the_plans_error_against_the_card():
    entries = [{"case": c, "predicted_peak_bytes": p, "attention": "cudnn"}
               for c, p in (("a", 3 * GIB), ("b", GIB), ("c", 10 * GIB), ("d", GIB), ("e", 2 * GIB))]
    data = {"cases": [
        {"case": "a", "peak_bytes": 2 * GIB, "build_peak_bytes": GIB, "attention": {"cudnn": 32}},
        {"case": "b", "peak_bytes": 4 * GIB, "build_peak_bytes": 4 * GIB, "attention": {}},
        {"case": "c", "error": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate", "oom": True},
        {"case": "e", "peak_bytes": None, "attention": {"cudnn refused": 2, "xla": 2}},
    ]}
    a, b, c, d, e = tool.rows(data, entries)
    assert a["error"] == pytest.approx(0.5) and a["ran"] and a["status"] == "ran"  # 3 GiB planned, 2 held: +50 %
    assert a["measured_attention"] == "cudnn"
    assert b["error"] == pytest.approx(-0.75) and b["status"] == "ran; peak set by the build"  # 1 against 4: -75 %
    assert b["measured_attention"] == "no call"
    assert c["error"] is None and not c["ran"] and c["status"] == "out of memory"
    assert d["error"] is None and not d["ran"] and d["status"] == "not measured"
    assert e["error"] is None and e["ran"]  # a dry run on the CPU: no allocator statistics


def test_compare_prints_the_table_from_a_measurement_file(tmp_path, capsys):
    planned, out = tmp_path / "planned.json", tmp_path / "out.json"
    planned.write_text(json.dumps({"cases": [
        {"case": "x b1 adamw", "set": "hub_gpu", "predicted_peak_bytes": 11 * GIB, "attention": "xla"},
        {"case": "y", "set": "gpu", "predicted_peak_bytes": 1}]}))
    out.write_text(json.dumps({"cases": [{"case": "x b1 adamw", "peak_bytes": 10 * GIB, "build_peak_bytes": GIB,
                                          "device": "NVIDIA H200", "attention": {"xla": 4}}]}))
    (row,) = tool.compare(str(out), planned)
    assert row["error"] == pytest.approx(0.1)
    printed = capsys.readouterr().out
    assert "+10.0%" in printed and "1 of 1 steps measured on NVIDIA H200" in printed


def test_an_out_of_memory_child_is_told_from_another_failure():
    stderr = "measure: task built at 3.0 s\nTraceback ...\njaxlib.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory " \
             "while trying to allocate 9.1GiB.\nsome later line\n"
    assert tool._error_line(stderr).startswith("jaxlib.XlaRuntimeError: RESOURCE_EXHAUSTED")
    assert tool._last_stage(stderr) == "measure: task built at 3.0 s"
    assert tool._error_line("measure: x\nValueError: bad\n") == "ValueError: bad"


def test_the_expected_attention_follows_the_cards_rules():
    from calc.hub import make_hub_spec

    assert tool.expected_attention(make_hub_spec("llama3.2_1b", 512, 4), "9.0") == "cudnn"
    assert tool.expected_attention(make_hub_spec("llama3.2_1b", 512, 4), "7.5") == "xla"  # a T4: no flash
    assert tool.expected_attention(make_hub_spec("llama3.2_1b", 512, 4, "float32"), "9.0") == "xla"
    assert tool.expected_attention(make_hub_spec("gemma_2b_en", 512, 4), "9.0") == "cudnn"  # no soft cap
    assert tool.expected_attention(make_hub_spec("gemma2_2b_en", 512, 4), "9.0") == "xla"
    assert tool.expected_attention(make_hub_spec("gpt2_base_en", 512), "9.0") == "xla"


def test_the_cards_temporaries_are_set_against_the_plans_in_logits_units(tmp_path):
    """``compare --dumps``: the card's compiled temporaries against the plan's, the difference over the step's
    logits (batch x tokens x vocabulary x 2 bytes in bfloat16); no logits for a model that makes none."""
    qwen = next(e for e in tool.planned_entries() if e["case"].startswith("qwen2.5_0.5b_en-seq4096"))
    vit = next(e for e in tool.planned_entries() if e["case"].startswith("vit_base"))
    logits = 2 * 4096 * 151_936 * 2  # batch 2, 4,096 tokens, Qwen 2.5's vocabulary, bfloat16
    folder = "".join(ch if ch.isalnum() else "_" for ch in qwen["case"])
    dumps = {folder: {"temporaries_bytes": qwen["plan"]["xla_temporaries"] + logits},
             "".join(ch if ch.isalnum() else "_" for ch in vit["case"]): {"temporaries_bytes": vit["plan"]["xla_temporaries"]}}
    rows = {r["case"]: r for r in tool.dump_rows(dumps, tool.planned_entries())}
    assert rows[qwen["case"]]["logits"] == logits and rows[qwen["case"]]["in_logits"] == 1.0
    assert rows[vit["case"]]["extra"] == 0 and rows[vit["case"]]["in_logits"] is None
    assert len(rows) == 2  # the cases without a dump are left out
    env = tool.dump_env({"XLA_FLAGS": "--xla_gpu_autotune_level=0"}, tmp_path, qwen["case"])
    assert env["XLA_FLAGS"] == f"--xla_gpu_autotune_level=0 --xla_dump_to={tmp_path / folder} --xla_dump_hlo_as_proto"
    assert tool.dump_env({"A": "1"}, None, qwen["case"]) == {"A": "1"}
