"""KerasHub models: the presets' figures, their setups, and XLA's plan of their train step."""

import json

import pytest

from calc import xla
from calc.xla.compute import compile_request
from calc.hub import (NO_ATTENTION, HubSpec, hub_models, lora_parameters, lora_trainable_bytes, make_hub_spec,
                      optimizer_state_bytes)
from calc.requests import plan_spec_from_dict, spec_to_dict
from calc.types import TrainingConfig
from tests.tools import XLA_ATTENTION_TEMP, in_a_plan_child

needs_plan = pytest.mark.skipif(xla.unavailable_reason() is not None,
                                reason=f"no XLA plan here: {xla.unavailable_reason()}")


def test_every_preset_names_its_sources_and_a_known_task():
    models = hub_models()
    assert len(models) >= 20
    families = {m.family for m in models.values()}
    assert {"Gemma", "Gemma3", "Llama3", "Mistral", "Qwen", "Phi3", "GPT2", "Bert", "Roberta", "DebertaV3",
            "ViT", "DeiT", "ResNet", "DenseNet", "VGG", "MobileNet", "Xception", "HGNetV2",
            "SwinTransformer", "EfficientNet", "CSPNet"} <= families
    for m in models.values():
        assert m.architecture_source.startswith("https://") and m.params_source.startswith("keras-hub ")
        assert m.task in ("causal_lm", "text_classifier", "image_classifier") and m.params > 0


def test_a_setup_is_checked_before_anything_is_built():
    assert make_hub_spec("gemma2_2b_en") == HubSpec("gemma2_2b_en", 512, 0, "bfloat16", 2)
    assert make_hub_spec("bert_base_en_uncased").dtype == "float32"
    assert make_hub_spec("vit_base_patch16_224_imagenet").sequence_length == 0
    for bad, words in [(dict(preset="gemma_3b"), "unknown KerasHub preset"),
                       (dict(preset="gpt2_base_en", sequence_length=2048), "1 to 1,024 tokens"),
                       (dict(preset="vit_base_patch16_224_imagenet", sequence_length=128), "image model"),
                       (dict(preset="gemma_2b_en", dtype="int8"), "dtype policy"),
                       (dict(preset="gemma_2b_en", lora_rank=5000), "LoRA rank"),
                       (dict(preset="bert_base_en_uncased", classes=10**7), "classes"),
                       (dict(preset="resnet_50_imagenet", lora_rank=4), "no attention projections"),
                       (dict(preset="swin_tiny_patch4_window7_224", lora_rank=4), "no attention projections")]:
        with pytest.raises(ValueError, match=words):
            make_hub_spec(**bad)


def test_a_setup_travels_to_the_child_and_back():
    spec = make_hub_spec("llama3.2_1b", 1024, 8)
    assert plan_spec_from_dict(json.loads(json.dumps(spec_to_dict(spec)))) == spec
    assert spec.key == "llama3.2_1b-seq1024-lora8-bfloat16"


def test_lora_adds_an_a_and_a_b_per_query_and_value_kernel_by_hand():
    # Gemma 2B: 18 layers, hidden 2048, 8 query heads and 1 key-value head of 256. The query kernel
    # (8, 2048, 256) gains A (8, 2048, 4) and B (4, 256); the value kernel (1, 2048, 256) A (1, 2048, 4)
    # and B (4, 256).
    by_hand = 18 * ((8 * 2048 * 4 + 4 * 256) + (1 * 2048 * 4 + 4 * 256))
    assert lora_parameters(hub_models()["gemma_2b_en"], 4) == by_hand == 1_363_968
    # BERT base: 12 layers of 12 heads of 64 over 768; query and value kernels (768, 12, 64), whose
    # biases (12, 64) train too.
    assert lora_parameters(hub_models()["bert_base_en_uncased"], 8) == 12 * 2 * (768 * 12 * 8 + 8 * 64 + 768)
    spec = make_hub_spec("gemma_2b_en", lora_rank=4)
    assert lora_trainable_bytes(spec) == 4 * by_hand  # LoRA's kernels are float32 under bfloat16
    assert optimizer_state_bytes(4 * by_hand, 2) == 2 * 4 * by_hand + 4 + 4  # two slots, iteration, rate


@needs_plan
@pytest.mark.keras
def test_every_preset_is_built_without_its_weights_to_its_published_parameter_count():
    """45 presets, 74 billion parameters in all, built in one process that stays near a gigabyte:
    no weight is made, and each model has exactly the parameters keras-hub publishes for it."""
    answer = in_a_plan_child(
        "import json, resource\n"
        "from calc.hub import hub_models\n"
        "from calc.keras.hub import parameter_counts\n"
        "each = {p: parameter_counts(m, 4, 1000) for p, m in hub_models().items()}\n"
        "counts = {p: c[0] for p, c in each.items()}\n"
        "timm = {p: c[1] for p, c in each.items() if c[1] is not None}\n"
        "lora = {p: c[2] for p, c in each.items()}\n"
        "tied = {p: c[3] for p, c in each.items()}\n"
        "print(json.dumps({'counts': counts, 'lora': lora, 'timm': timm, 'tied': tied,\n"
        "                  'rss': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))")
    assert answer["counts"] == {p: m.params for p, m in hub_models().items()}
    # Where keras-hub publishes timm's count (EfficientNet, CSPNet), it is the 1,000-class classifier's trainable
    # parameters: the backbone's trainable ones and the head's (features x 1,000 + 1,000), exactly.
    assert answer["timm"] == {p: m.published_params for p, m in hub_models().items() if m.published_params}
    assert len(answer["timm"]) >= 4
    # LoRA's trainable parameters are what its shapes imply, for every family the formula describes.
    described = {p: lora_parameters(m, 4) for p, m in hub_models().items() if lora_parameters(m, 4) is not None}
    assert len(described) >= 20 and described == {p: answer["lora"][p] for p in described}
    assert {p: answer["lora"][p] for p, m in hub_models().items() if m.family == "ResNet"} == {
        "resnet_18_imagenet": 0, "resnet_50_imagenet": 0}  # no attention: LoRA would train nothing
    # Every family the setup refuses LoRA for has nothing LoRA trains (Swin's attention has one fused qkv Dense).
    refused = {p: answer["lora"][p] for p, m in hub_models().items() if m.family in NO_ATTENTION}
    assert len(refused) >= 13 and set(refused.values()) == {0}
    assert sum(answer["counts"].values()) > 70e9 and answer["rss"] < 3 * 2**30
    # A causal LM's head is its token embedding exactly where the data file says so (the logits a mesh splits).
    causal = {p: m.head_tied for p, m in hub_models().items() if m.task == "causal_lm"}
    assert causal == {p: answer["tied"][p] for p in causal} and 0 < sum(causal.values()) < len(causal)


@needs_plan
@pytest.mark.keras
def test_a_lora_plan_holds_what_the_parameter_count_implies_to_the_byte(tmp_path, monkeypatch, capsys):
    """GPT-2 base with LoRA rank 4 at 128 tokens, batch 2 on a T4, through the command line: the
    trainable weights and the optimizer's state are what LoRA's parameter count implies, the frozen
    weights the preset's published count in bfloat16, and the parts sum to the peak (none of these
    depends on the batch: one compile checks them)."""
    from calc.cli.main import main
    from calc.facts.optimizers import slots_per_variable
    from calc.types import Optimizer, OptimizerOptions

    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path / "cache"))
    spec = make_hub_spec("gpt2_base_en", 128, 4)
    lora = 12 * 2 * (768 * 12 * 4 + 4 * 64 + 768)  # A and B of query and value, and their biases
    assert lora_parameters(spec.model, 4) == lora
    batch = 2
    request, key = xla.family_request(spec, TrainingConfig(batch_size=batch, optimizer="adamw", device="gpu"),
                                      "t4")
    raw = compile_request(request, key)
    # A and B in float32, the biases in bfloat16.
    assert raw["trainable_params"] == lora
    assert raw["trainable_bytes"] == lora_trainable_bytes(spec) == 4 * (lora - 12 * 2 * 768) + 2 * 12 * 2 * 768
    # The frozen rest in bfloat16, and each dropout layer's seed (two uint32): three a block and the
    # embedding's (the preset trains with dropout 0.1).
    assert raw["non_trainable_bytes"] == 2 * (spec.model.params - 12 * 2 * 768) + 8 * (3 * 12 + 1)
    slots = slots_per_variable(Optimizer.ADAMW, OptimizerOptions(), 1)
    assert raw["optimizer_bytes"] == optimizer_state_bytes(raw["trainable_bytes"], slots)
    assert main(["estimate", "--model", "gpt2_base_en", "--lora-rank", "4", "--seq-len", "128", "--optimizer",
                 "adamw", "--batch-size", str(batch), "--gpu", "t4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan_source"] == "compiled" and out["hub"]["lora_params"] == lora
    assert sum(out["components"].values()) == out["peak_bytes"]
    assert out["components"]["weights"] == raw["trainable_bytes"] + raw["non_trainable_bytes"]


def test_the_command_line_refuses_what_a_hub_model_cannot_take(capsys):
    from calc.cli.main import main

    assert main(["estimate", "--model", "gemma_2b_en", "--image-size", "224", "--gpu", "t4"]) == 2
    assert "drop --image-size" in capsys.readouterr().err
    assert main(["estimate", "--model", "gemma_2b_en", "--step", "graph", "--gpu", "t4"]) == 2
    assert "answered by XLA's plan" in capsys.readouterr().err
    assert main(["estimate", "--model", "gemma_2b_en"]) == 2
    assert "add --gpu PRESET" in capsys.readouterr().err
    assert main(["estimate", "--model", "gemma_2b_en", "--frozen-backbone", "--gpu", "t4"]) == 2
    assert "a causal LM has none" in capsys.readouterr().err
    assert main(["estimate", "--model", "ResNet50", "--lora-rank", "4"]) == 2
    assert "--lora-rank set up a KerasHub model" in capsys.readouterr().err
    assert main(["models", "--hub", "--json"]) == 0
    listed = {m["preset"] for m in json.loads(capsys.readouterr().out)["hub_models"]}
    assert listed == set(hub_models())


def test_the_longest_sequence_is_bracketed_then_halved_until_a_length_more_or_less_decides_nothing():
    from calc.xla.search import longest_fitting, sequence_settled

    def attention_like(n):  # grows faster than the sequence, as attention's scores do
        return 10_000 + 50 * n + n * n

    budget = attention_like(3000)
    for start in (512, 3000, 8192, 100_000):
        found = longest_fitting(attention_like, budget, start, 1 << 17)
        assert found.exceeds is not None and sequence_settled(found.max_sequence, found.exceeds)
        assert attention_like(found.max_sequence) <= budget < attention_like(found.exceeds)
        assert found.max_sequence <= 3000 < found.exceeds and found.compiles <= 14
    capped = longest_fitting(attention_like, budget, 512, 1024)  # GPT-2 takes 1,024 tokens at most
    assert (capped.max_sequence, capped.exceeds, capped.compiled) == (1024, None, ((512, attention_like(512)),
                                                                                  (1024, attention_like(1024))))
    nothing = longest_fitting(attention_like, 5_000, 512, 1 << 17)
    assert nothing.max_sequence == 0 and nothing.exceeds == 1


@pytest.mark.keras
def test_max_seq_searches_the_plans_of_each_length(monkeypatch, tmp_path, capsys):
    from calc.cli.main import main
    from calc.xla import cache, compute

    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cache, "plan_versions", lambda: {"jax": "test"})
    lengths = []

    class Worker:
        def compile(self, request, timeout_s=0):
            n = request["spec"]["hub"]["sequence_length"]
            lengths.append(n)
            state = 5 * 2**30
            return {"argument_bytes": state + 8 * n, "output_bytes": state, "alias_bytes": state,
                    "temp_bytes": 2**20 * n + 64 * n * n, "trainable_bytes": 2**20, "non_trainable_bytes": state - 2**20,
                    "optimizer_bytes": 2**21 + 8, "metrics_bytes": 16, "batch_bytes": 8 * n}

    monkeypatch.setattr(compute, "run_plan", lambda request, key, **_: Worker().compile(request))
    assert main(["max-seq", "--model", "gemma2_2b_en", "--lora-rank", "4", "--batch-size", "1", "--gpu", "t4",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert lengths[0] == 512 and out["compiles"] == len(lengths) == len(set(lengths))
    fits = {c["sequence_length"]: c["fits"] for c in out["compiled"]}
    assert fits[out["max_sequence_length"]] and not fits[out["exceeds"]]
    assert out["exceeds"] - out["max_sequence_length"] <= max(1, out["max_sequence_length"] // 64)
    assert main(["max-seq", "--model", "vit_base_patch16_224_imagenet", "--gpu", "t4"]) == 2
    assert "image model" in capsys.readouterr().err


@needs_plan
@pytest.mark.keras
def test_an_image_classifier_plans_with_its_new_head(tmp_path, monkeypatch):
    """ResNet-18 from its figures, a new head of 2 classes, batch 2 on a T4: every weight, the head's too,
    in float32, and no LoRA for a network without attention."""
    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path / "cache"))
    spec = make_hub_spec("resnet_18_imagenet")
    plan = xla.compute_plan(spec, TrainingConfig(batch_size=2, optimizer="sgd", device="gpu"), "t4")
    assert plan.peak_bytes == sum(plan.components().values())
    assert plan.weights_bytes == 4 * (11_186_112 + 512 * 2 + 2)  # the backbone, then Dense(2) on 512 features
    assert plan.input_batch_bytes == 2 * 224 * 224 * 3 * 4 + 2 * 4  # float32 images, int32 labels


@pytest.mark.keras
def test_attention_is_chosen_as_on_the_card():
    """Keras takes cuDNN's flash attention on an Ampere or newer card for bfloat16 heads of at most 128
    (256 from Hopper on), and KerasHub's Gemma asks for the fused op on a GPU other than a T4 and
    without a logit soft cap: the plan's child answers those questions as the card would."""
    code = """
import json
import jax.numpy as jnp
from calc.keras.hub import answer_as_the_card
from calc.xla.targets import target_for
from keras.src.backend.jax.nn import _can_use_flash_attention
from keras_hub.src.models.gemma.gemma_attention import CachedGemmaAttention
out = {}
for card in ("t4", "a100-40", "l4", "h100-80"):
    answer_as_the_card(target_for(card).config_text())
    head64, head256 = jnp.zeros((1, 128, 8, 64), "bfloat16"), jnp.zeros((1, 128, 8, 256), "bfloat16")
    plain = CachedGemmaAttention(head_dim=256, num_query_heads=8, num_key_value_heads=1)
    capped = CachedGemmaAttention(head_dim=256, num_query_heads=8, num_key_value_heads=1, logit_soft_cap=50.0)
    out[card] = [bool(_can_use_flash_attention(head64, head64, head64, None)),
                 bool(_can_use_flash_attention(head256, head256, head256, None)),
                 plain._use_fused_attention_op(), capped._use_fused_attention_op()]
print(json.dumps(out))
"""
    assert in_a_plan_child(code) == {"t4": [False, False, False, False], "a100-40": [True, False, True, False],
                                      "l4": [True, False, True, False], "h100-80": [True, True, True, False]}


@needs_plan
@pytest.mark.keras
def test_flash_attention_keeps_no_score_matrices_on_an_ampere_card():
    """Qwen 2.5 0.5B's figures (14 query heads of 64) on two of its 24 layers, with LoRA at 1,024 tokens in
    bfloat16 on an L4: the step Keras runs there calls cuDNN's flash attention, and plans at least the two
    layers' probabilities (14 x 1024 x 1024 bfloat16 each) less than the step with XLA's attention, which the
    same card gets where cuDNN is missing. (Each layer is its own attention; two keep the compile short.)"""
    code = XLA_ATTENTION_TEMP + """
import dataclasses, json
import calc.hub
from calc.hub import make_hub_spec
from calc.keras.hub import HubPlanModel
from calc.types import TrainingConfig
from calc.xla.targets import target_for
presets = calc.hub.hub_models()
qwen = presets["qwen2.5_0.5b_en"]
two = dataclasses.replace(qwen, backbone={**qwen.backbone, "num_layers": 2})
calc.hub.hub_models = lambda: {**presets, "qwen2.5_0.5b_en": two}
model = HubPlanModel(make_hub_spec("qwen2.5_0.5b_en", 1024, 4, "bfloat16"),
                     TrainingConfig(batch_size=1, optimizer="adamw", device="gpu"))
card = target_for("l4").config_text()
flash = model.plan(1, card)["temp_bytes"]
print(json.dumps([flash, xla_attention_temp(model, 1, card), model._preset.backbone["num_layers"]]))
"""
    flash, xla_attention, layers = in_a_plan_child(code)
    assert layers == 2
    probabilities = 2 * 14 * 1024 * 1024 * 2
    assert xla_attention - flash >= probabilities, (flash, xla_attention)


@needs_plan
@pytest.mark.keras
def test_a_t4_refuses_bfloat16_attention_in_one_line(tmp_path, monkeypatch):
    """Qwen's attention multiplies bfloat16 matrices with float32 sums, which XLA compiles only for
    compute capability 8.0 or newer: on a T4 (7.5) the plan says so and what to choose instead."""
    from calc.xla.plan import PlanError

    monkeypatch.setenv("CALC_CACHE_DIR", str(tmp_path / "cache"))
    spec = make_hub_spec("qwen2.5_0.5b_en", 128, 4, "bfloat16")
    request, key = xla.family_request(spec, TrainingConfig(batch_size=1, optimizer="adamw", device="gpu"), "t4")
    with pytest.raises(PlanError, match="compute capability 8.0.*choose float32 or mixed_float16"):
        compile_request(request, key)
