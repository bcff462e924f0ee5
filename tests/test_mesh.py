"""Meshes and quantized fine-tuning: what each device holds, checked by hand from the layout map and the
figures, and Keras's own quantize against the variables the plan builds without weights."""

import json

import pytest

from calc import xla
from calc.hub import hub_models, make_hub_spec
from calc.requests import config_from_dict, config_to_dict, plan_spec_from_dict, spec_to_dict
from calc.types import TrainingConfig
from tests.tools import in_a_plan_child

needs_plan = pytest.mark.skipif(xla.unavailable_reason() is not None,
                                reason=f"no XLA plan here: {xla.unavailable_reason()}")


def test_a_mesh_is_checked_and_named_only_where_it_is_one():
    config = TrainingConfig(batch_size=8, num_gpus=2, model_parallel=4, hosts=2)
    assert (config.devices, config.mesh, config.per_replica_batch) == (8, "2x4", 4)
    assert config.at_replica_batch(3).batch_size == 6 and config.at_replica_batch(3).model_parallel == 4
    assert config_from_dict(json.loads(json.dumps(config_to_dict(config)))) == config
    # One card's setup is keyed as it always was: the plans shipped for it are found.
    assert "model_parallel" not in config_to_dict(TrainingConfig()) and "hosts" not in config_to_dict(TrainingConfig())
    for bad in (dict(num_gpus=2, hosts=3), dict(num_gpus=2, hosts=8), dict(model_parallel=0)):
        with pytest.raises(ValueError):
            TrainingConfig(batch_size=8, **bad)


def test_a_quantized_setup_travels_to_the_child_and_back():
    spec = make_hub_spec("gemma2_9b_en", 512, 4, quantize="int4")
    assert plan_spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec
    assert spec.key == "gemma2_9b_en-seq512-lora4-bfloat16-int4"
    assert "quantize" not in spec_to_dict(make_hub_spec("gemma2_9b_en"))["hub"]  # the shipped plans' keys
    with pytest.raises(ValueError, match="quantize must be one of"):
        make_hub_spec("gemma2_9b_en", quantize="int2")


def test_a_mesh_request_compiles_each_replicas_batch_on_its_mesh():
    from calc.xla.cache import at_batch, plan_request, request_batch
    from calc.xla.targets import target_for

    spec = make_hub_spec("qwen2.5_0.5b_en", 128, 4)
    request = plan_request(spec, TrainingConfig(batch_size=6, num_gpus=2, model_parallel=2), target_for("l4"))
    assert request["config"]["batch_size"] == 6 and request["config"]["num_gpus"] == 2
    assert request_batch(request) == 3 and request_batch(at_batch(request, 5)) == 5
    assert at_batch(request, 5)["config"]["batch_size"] == 10
    # XLA plans up to 8 cards a host (data-parallel replicas beyond are the walk's alone).
    with pytest.raises(xla.PlanError, match="1 to 8 cards a host"):
        plan_request(spec, TrainingConfig(batch_size=16, num_gpus=4, model_parallel=4), target_for("l4"))
    assert plan_request(spec, TrainingConfig(batch_size=16, num_gpus=4, model_parallel=4, hosts=2), target_for("l4"))


def test_the_command_line_takes_a_mesh_and_refuses_what_cannot_be_sharded(capsys):
    from calc.cli.main import main

    for argv, words in [(["--model", "ResNet50", "--mesh", "1x2"], "no layout map"),
                        (["--model", "ResNet50", "--mesh", "2x1", "--gpus", "2"], "exclude each other"),
                        (["--model", "ResNet50", "--quantize", "int8"], "--quantize set up a KerasHub model"),
                        (["--model", "gemma2_2b_en", "--mesh", "2by2"], "DATAxMODEL"),
                        (["--model", "gemma2_2b_en", "--mesh", "1x8", "--hosts", "3"], "same number on each")]:
        assert main(["estimate", *argv, "--gpu", "l4"]) == 2
        assert words in capsys.readouterr().err


# Qwen 2.5 0.5B (calc/data/hub_models.json): 24 layers, hidden 896 = 14 query heads of 64, 2 key-value heads,
# feed-forward 4,864, a tied vocabulary of 151,936. Its layout map (QwenBackbone.get_layout_map) shards the
# embedding and every attention and feed-forward kernel over the model axis; norms and biases stay whole.
QWEN = dict(vocab=151_936, layers=24, heads=14, kv=2, hidden=896, head=64, ffw=4_864)


def _qwen_kernels() -> int:
    q = QWEN
    per_layer = (q["heads"] * q["hidden"] * q["head"] * 2  # query and attention_output
                 + 2 * q["kv"] * q["hidden"] * q["head"]  # key and value
                 + 3 * q["hidden"] * q["ffw"])  # intermediate, gate and output
    return q["vocab"] * q["hidden"] + q["layers"] * per_layer


QWEN_BY_DEVICE = '''
import json
from calc.hub import make_hub_spec
from calc.keras.hub import HubPlanModel
from calc.keras.plan import _device_bytes, _nbytes
from calc.types import TrainingConfig
from calc.xla.targets import target_for
out = {"mesh": {}}
for lora in (4, 0):
    spec = make_hub_spec("qwen2.5_0.5b_en", 128, lora)
    model = HubPlanModel(spec, TrainingConfig(batch_size=2, num_gpus=1, model_parallel=2, device="gpu"))
    state = model._state_on(model._mesh(target_for("l4").config_text()))
    out["mesh"][lora] = {"whole": sum(model.group_bytes), "per_device": sum(_device_bytes(g) for g in state)}
model = HubPlanModel(make_hub_spec("qwen2.5_0.5b_en", 128, 4, quantize="int8"), TrainingConfig(device="gpu"))
out["int8"] = {k: sum(_nbytes([model._state[g][i]]) for (g, i), kind in model.state_kinds.items() if kind == k)
               for k in ("quantized", "scales")}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def qwen():
    """Qwen 2.5 0.5B's state built without weights in one plan child: on a 1x2 mesh with LoRA 4 and trained whole
    (``mesh``), and quantized to int8 with LoRA 4 (``int8``)."""
    return in_a_plan_child(QWEN_BY_DEVICE)


@needs_plan
@pytest.mark.keras
def test_a_model_axis_of_two_halves_what_the_layout_map_shards_by_hand(qwen):
    """Qwen 2.5 0.5B on a 1x2 mesh: each device holds half of every kernel the layout map names, all the rest
    whole. With LoRA only the frozen bfloat16 kernels are sharded (the adapters and their slots are replicated);
    trained whole with Adam, each kernel's two bfloat16 slots are sharded as their kernel is."""
    assert hub_models()["qwen2.5_0.5b_en"].backbone["num_layers"] == QWEN["layers"]
    answer = qwen["mesh"]
    halved = 2 * _qwen_kernels() // 2  # bfloat16 bytes, half of them on the other device
    assert answer["4"]["whole"] - answer["4"]["per_device"] == halved
    assert answer["0"]["whole"] - answer["0"]["per_device"] == 3 * halved


TINY = {"Gemma": dict(vocabulary_size=1000, num_layers=2, num_query_heads=4, num_key_value_heads=1, hidden_dim=64,
                      intermediate_dim=128, head_dim=16),
        "Qwen": dict(vocabulary_size=1000, num_layers=2, num_query_heads=4, num_key_value_heads=2, hidden_dim=64,
                     intermediate_dim=128, tie_word_embeddings=True)}
QUANTIZED_LIKE_KERAS = '''
import json, keras, keras_hub
from calc.hub import HubModel
from calc.keras import clear_session
from calc.keras.hub import deferred_backbone
FIGURES = %r
out = {}
for family, figures in FIGURES.items():
    for mode in ("int8", "int4", "float8"):
        clear_session()
        keras.config.set_dtype_policy("bfloat16")
        real = getattr(keras_hub.models, family + "Backbone")(**figures)  # real weights, quantized by Keras
        real.quantize(mode)
        real.enable_lora(4)
        ours = deferred_backbone(HubModel("tiny", family, "causal_lm", 0, "", figures), 4, quantize=mode)
        seen = [sorted((v.path, list(v.shape), str(v.dtype), v.trainable) for v in m.weights) for m in (real, ours)]
        out[family + " " + mode] = {"same": seen[0] == seen[1],
                                    "int": sum(1 for v in seen[1] if v[2] == "int8" and v[0].endswith(("/kernel",
                                                                                                      "/embeddings")))}
print(json.dumps(out))
'''


@needs_plan
@pytest.mark.keras
def test_a_model_built_without_weights_holds_the_variables_keras_quantize_leaves():
    """For small Gemma and Qwen backbones, every variable (path, shape, dtype, whether it trains) of the model
    built under the quantized policies equals what Keras's own ``quantize`` makes from real weights, then LoRA.
    Only the variables are compared, not their values: JAX compiles the real weights' and quantize's operations
    for the CPU without LLVM's optimisation (most of this test's time otherwise)."""
    answer = in_a_plan_child(QUANTIZED_LIKE_KERAS % (TINY,), "--xla_backend_optimization_level=0")
    assert all(v["same"] for v in answer.values()), answer
    # int8 and int4 store integer kernels (an embedding and 7 kernels in each of 2 layers); float8 keeps them.
    assert {k: v["int"] for k, v in answer.items() if "float8" in k} == {"Gemma float8": 0, "Qwen float8": 0}
    assert all(answer[f"{f} {m}"]["int"] == 1 + 2 * 7 for f in TINY for m in ("int8", "int4"))


@needs_plan
@pytest.mark.keras
def test_int8_keeps_a_byte_a_kernel_weight_and_a_scale_an_output_by_hand(qwen):
    """Qwen 2.5 0.5B quantized to int8: the embedding and every attention and feed-forward kernel in one byte a
    weight; a scale for each output they make (each embedding row; each query and key-value head's channel; each
    hidden channel out of attention and the output projection; each feed-forward unit), in the policy's variable
    dtype (``add_weight`` without a dtype): two bytes under bfloat16."""
    q = QWEN
    answer = qwen["int8"]
    assert answer["quantized"] == _qwen_kernels()
    scales = q["vocab"] + q["layers"] * ((q["heads"] + 2 * q["kv"]) * q["head"] + 2 * q["hidden"] + 2 * q["ffw"])
    assert answer["scales"] == 2 * scales


def test_a_quantized_plan_splits_its_weights_and_sums_to_its_peak():
    from calc.xla.plan import plan_from_analysis

    raw = {"argument_bytes": 1000, "output_bytes": 300, "alias_bytes": 290, "temp_bytes": 500, "trainable_bytes": 40,
           "non_trainable_bytes": 600, "optimizer_bytes": 80, "metrics_bytes": 0, "batch_bytes": 10,
           "quantized_bytes": 450, "scale_bytes": 30}
    plan = plan_from_analysis(raw, "l4")
    parts = plan.components()
    assert (parts["quantized_weights"], parts["quantization_scales"], parts["weights"]) == (450, 30, 40 + 600 - 480)
    assert plan.peak_bytes == sum(parts.values()) == 1000 + 500 + 300 - 290
    assert "quantized_weights" not in plan_from_analysis({**raw, "quantized_bytes": 0, "scale_bytes": 0},
                                                         "l4").components()


DATA_PARALLEL = '''
import json
from calc.catalogue import ModelFile
from calc.keras.plan import plan_in_process
from calc.types import TrainingConfig
from calc.xla.targets import target_for
out = {}
for replicas in (1, 2):
    config = TrainingConfig(batch_size=4 * replicas, num_gpus=replicas, device="gpu")
    out[replicas] = plan_in_process(ModelFile("calc/data/models/plain_cnn.keras"), config,
                                    target_for("l4").config_text())
print(json.dumps(out))
'''


@needs_plan
@pytest.mark.keras
def test_a_data_parallel_mesh_plans_what_one_card_plans_at_its_batch_but_the_gradients_exchange():
    """A small CNN (three convolutions, batch norm, two dense layers), 4 images a card: on a 2x1 mesh each card
    holds the whole state and its half of the global batch, as one card at batch 4 does; XLA's partitioned step
    differs from the one-card step only by what the gradients' all-reduce adds or saves, at most a copy of the
    gradients."""
    answer = in_a_plan_child(DATA_PARALLEL)
    one, mesh = answer["1"], answer["2"]
    assert mesh["mesh"] == {"data": 2, "model": 1, "hosts": 1} and "mesh" not in one
    for part in ("argument_bytes", "batch_bytes", "trainable_bytes", "non_trainable_bytes", "optimizer_bytes"):
        assert mesh[part] == one[part], part
    assert abs(mesh["temp_bytes"] - one["temp_bytes"]) <= one["trainable_bytes"]


@needs_plan
@pytest.mark.keras
def test_the_command_line_plans_one_card_of_a_model_parallel_mesh(tmp_path, monkeypatch, capsys):
    """``estimate --mesh 1x2`` on Qwen 2.5 0.5B with LoRA 4 in float32: the JSON's peak and parts are one card's,
    beside the mesh; its weights are the whole model's (the frozen rest, LoRA's factors and the trained biases)
    less the half of every sharded kernel the other card holds. In bfloat16 on an L4 Keras takes cuDNN's flash
    attention, whose partitioner refuses Qwen's query and key-value heads split unevenly: that is said in one line."""
    from calc.cli.main import main
    from calc.hub import lora_trainable_bytes

    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["estimate", "--model", "qwen2.5_0.5b_en", "--lora-rank", "4", "--seq-len", "128", "--batch-size", "2",
            "--mesh", "1x2", "--gpu", "l4", "--json"]
    assert main(argv) == 2
    assert "cuDNN's flash attention" in capsys.readouterr().err
    assert main([*argv, "--dtype", "float32"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mesh"] == {"data": 1, "model": 2, "hosts": 1, "devices": 2, "layout": "the preset's layout map",
                           "per_device_batch": 2, "peak_is_per_device": True}
    spec = make_hub_spec("qwen2.5_0.5b_en", 128, 4, "float32")
    biases = QWEN["layers"] * (QWEN["heads"] + QWEN["kv"]) * QWEN["head"]  # the query's and value's, trained
    whole = 4 * (spec.model.params - biases) + lora_trainable_bytes(spec)
    assert out["components"]["weights"] == whole - 4 * _qwen_kernels() // 2
    assert sum(out["components"].values()) == out["peak_bytes"]


def _sharded_answer(request):
    """A child's answer for a 9 GB model whose weights the model axis divides, and 1 GB of temporaries."""
    axis = int(request["config"].get("model_parallel", 1))
    if axis == 8:
        raise xla.PlanError("XLA could not split this step over the mesh")
    weights = 9 * 10**9 // axis
    return {"argument_bytes": weights, "output_bytes": weights, "alias_bytes": weights, "temp_bytes": 10**9,
            "trainable_bytes": 0, "non_trainable_bytes": weights, "optimizer_bytes": 0, "metrics_bytes": 0,
            "batch_bytes": 0}


@needs_plan
def test_the_fewest_cards_double_the_model_axis_until_one_card_fits(tmp_path, monkeypatch):
    """One card's plan is 10 GB, two cards' 5.5, four's 3.25 (the weights halve, the temporaries stay), and beside
    each its share of one replica's logits (3 x 512 tokens x 256,000 words x 2 bytes): Gemma's head is its token
    embedding, whose vocabulary the model axis splits, so a card of a 1xM mesh keeps 1/M of them. With 4 GB a card
    the answer is four; with 3 GB the search meets the partitioner's refusal at eight and says so."""
    from calc.xla.search import fewest_cards

    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path))
    spec, config = make_hub_spec("gemma2_9b_en", 512, 4), TrainingConfig(batch_size=3, device="gpu")  # none shipped
    logits = 3 * 512 * 256_000 * 2
    found = fewest_cards(spec, config, "l4", 4 * 10**9, runner=_sharded_answer)
    assert found.model_parallel == 4 and found.stopped == ""
    assert found.tried == ((1, 10 * 10**9 + logits), (2, 55 * 10**8 + logits // 2), (4, 325 * 10**7 + logits // 4))
    refused = fewest_cards(spec, config, "l4", 3 * 10**9, runner=_sharded_answer)
    assert refused.model_parallel is None and "split this step" in refused.stopped and len(refused.tried) == 3


def test_the_mesh_logits_tool_reads_one_cards_head_product_from_the_partitioned_module():
    """``tools/mesh_logits.py`` takes the largest output of the head's product (Qwen 2.5 0.5B on a 1x2 mesh, 2 x 128
    tokens: the vocabulary of 151,936 split in two), whatever the instruction, and nothing else's."""
    from tests.tools import load_tool

    module = "\n".join([
        '%fusion.3 = f32[2,128,75968]{2,1,0} fusion(%p0), metadata={op_name="jit(train_step)/jvp(token_embedding)/'
        'dot_general"}',
        '%custom-call.9 = (f32[256,75968]{1,0}, s8[4194304]{0}) custom-call(%a, %b), custom_call_target="__cublas$gemm",'
        ' metadata={op_name="jit(train_step)/jvp(token_embedding)/dot_general"}',
        '%gte = f32[256,75968]{1,0} get-tuple-element(%custom-call.9), index=0, metadata={op_name="jit(train_step)/'
        'jvp(token_embedding)/dot_general"}',
        '%sub = f32[2,128,151936]{2,1,0} subtract(%x, %y), metadata={op_name="jit(train_step)/jvp(compile_loss)/sub"}',
    ])
    assert load_tool("mesh_logits").head_elements(module) == 256 * 75968


@needs_plan
@pytest.mark.keras
def test_xlas_partitioner_leaves_a_card_the_logits_share_the_verdict_keeps():
    """Compiled at toy size (``tools/mesh_logits.py``): Gemma on a 4x2 mesh, whose tied head's product a card holds
    for two replicas (the batch gathered over the data axis), and Llama 3 on 1x2, whose own head leaves each card
    one replica's, are what ``calc.xla.kept`` keeps (2 sequences of 32 tokens a replica, 1,024 words)."""
    from calc.hub import HubModel
    from calc.xla.kept import logits_share
    from tests.tools import load_tool

    tool = load_tool("mesh_logits")
    replica = tool.PER_REPLICA * tool.TOKENS * tool.VOCABULARY
    for name, mesh in (("Gemma", "4x2"), ("Llama 3", "1x2")):
        family, figures, tied = tool.FAMILIES[name]
        data, model = map(int, mesh.split("x"))
        toy = HubModel("toy", family, "causal_lm", 0, "", figures, head_tied=tied)
        config = TrainingConfig(batch_size=2 * data, num_gpus=data, model_parallel=model, device="gpu")
        numerator, denominator = logits_share(toy, config)
        assert tool.per_card(name, mesh) == replica * numerator // denominator, (name, mesh)
