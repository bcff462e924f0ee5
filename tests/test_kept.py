"""What XLA's verdict keeps free beside the plan: the mechanism's bytes, counted by hand, and the measured record."""

import pytest

from calc.catalogue import make_spec
from calc.hub import make_hub_spec
from calc.xla.curve import CompiledPoint, PlanCurve
from calc.xla.kept import LOGITS, WORKSPACE, Kept, kept_for


def test_a_catalogue_model_keeps_its_largest_convolutions_operands_per_sample():
    # VGG16's largest convolution is block1_conv2: 224 x 224 x 64 in and out.
    operands = 2 * 224 * 224 * 64
    assert kept_for(make_spec("VGG16"), "float32") == Kept(WORKSPACE, operands * 4)
    assert kept_for(make_spec("VGG16"), "mixed_float16") == Kept(WORKSPACE, operands * 2)
    # At half the side, a quarter of the elements: a convolution's tensors follow the image's area.
    assert kept_for(make_spec("VGG16", 112), "float32").per_sample_bytes == operands // 4 * 4
    assert kept_for(make_spec("VGG16"), "float32").at(8) == 8 * operands * 4


def test_a_causal_lm_keeps_one_sequences_logits_and_other_kerashub_models_nothing():
    gemma = make_hub_spec("gemma2_2b_en", 512, 4)
    assert kept_for(gemma, "") == Kept(LOGITS, 512 * 256_000 * 2)  # bfloat16 logits
    assert kept_for(make_hub_spec("gemma2_2b_en", 512, 4, dtype="float32"), "").per_sample_bytes == 512 * 256_000 * 4
    assert kept_for(make_hub_spec("bert_base_en_uncased", 128), "") == Kept()  # a classifier's logits: its classes
    assert kept_for(make_hub_spec("vit_base_patch16_224_imagenet"), "") == Kept()


def test_a_card_of_a_mesh_keeps_its_share_of_the_logits_where_the_model_axis_splits_a_tied_head():
    """Gemma's head is its token embedding, whose vocabulary the layout map puts on the model axis and its hidden
    size on the data axis: a card holds DATA / MODEL replicas' logits (``tools/mesh_logits.py`` reads it from XLA's
    partitioned module). Llama 3's head has its own weights: every card holds one replica's."""
    from calc.types import TrainingConfig
    from calc.xla.budget import kept_lines, step_budget
    from calc.gpus import GPU_PRESETS

    gemma, llama = make_hub_spec("gemma2_9b_en", 512, 4), make_hub_spec("llama3_8b_en", 512, 4)
    replica = 512 * 256_000 * 2

    def mesh(data, model):
        return TrainingConfig(batch_size=4 * data, num_gpus=data, model_parallel=model, device="gpu")

    assert kept_for(gemma, "", mesh(1, 2)) == Kept(LOGITS, replica // 2, (1, 2))
    assert kept_for(gemma, "", mesh(1, 4)).per_sample_bytes == replica // 4
    assert kept_for(gemma, "", mesh(2, 2)) == Kept(LOGITS, replica)  # 2/2: one replica's
    assert kept_for(gemma, "", mesh(4, 2)).at(4) == 4 * 2 * replica  # the batch gathered over the data axis
    assert kept_for(gemma, "", mesh(4, 1)) == kept_for(gemma, "") == Kept(LOGITS, replica)  # data parallel: each its own
    assert kept_for(llama, "", mesh(1, 4)) == kept_for(llama, "") == Kept(LOGITS, 512 * 128_256 * 2)
    budget = step_budget(GPU_PRESETS["l4"], 0.0, gemma, "", mesh(1, 2))
    assert budget.kept_at(4) == 4 * replica // 2
    assert "one card's share: 1/2 x a replica's" in kept_lines(budget, 4)[0]
    assert "one card's share: 2 x a replica's" in kept_lines(step_budget(GPU_PRESETS["l4"], 0.0, gemma, "",
                                                                         mesh(4, 2)), 4)[0]
    assert "share" not in kept_lines(step_budget(GPU_PRESETS["l4"], 0.0, gemma, ""), 4)[0]


def test_the_largest_batch_keeps_the_mechanisms_bytes_beside_each_plan():
    # Plans on a line: 400 + 81.25 b; kept free beside them 18 b, so a batch needs 400 + 99.25 b.
    curve = PlanCurve.of([CompiledPoint(16, 1_700, 1_500), CompiledPoint(64, 5_600, 5_300)], 10**6)
    assert curve.max_batch(4_400).batch == 49  # (4,400 - 400) / 81.25
    kept = curve.keeping(18)
    assert kept.max_batch(4_400).batch == 40  # (4,400 - 400) / 99.25
    assert kept.next_search_batch(4_400, 1) == 40  # the search compiles where the needed line crosses
    assert kept.at(32) == curve.at(32)  # the plan itself is the plan's
    assert kept.adding(CompiledPoint(40, 3_650, 3_300)).kept_per_sample == 18


def test_every_measured_gpu_step_fits_under_the_margin_its_mechanism_gives():
    """On the card where each step's verdict would just say "fits" (its plan and its mechanism's bytes filling
    the card less the residual share), the measured peak fitted: the residual is the record's own."""
    from calc.validation.margins import hub_plan_margin, plan_margin

    for record in (plan_margin(), hub_plan_margin()):
        assert record.cases == len(record.steps) > 0
        for step in record.steps:
            card = (step.plan_bytes + step.kept_bytes) / (1 - record.fraction)
            assert step.measured_bytes <= card + 1, step.case
        assert record.fraction < record.flat  # the mechanism explains most of what a flat share kept


@pytest.mark.parametrize("record", ["catalogue", "hub"])
def test_the_residual_is_what_the_measured_steps_took_beyond_their_plans_and_mechanism(record):
    import json
    from pathlib import Path

    from calc.validation.margins import hub_plan_margin, plan_margin

    margin = plan_margin() if record == "catalogue" else hub_plan_margin()
    root = Path(__file__).resolve().parent.parent
    if record == "hub":  # by hand from the files: the logits of each causal LM step, bfloat16
        planned = {c["case"]: c["predicted_peak_bytes"] for c in
                   json.loads((root / "validation" / "planned.json").read_text())["cases"] if c.get("set") == "hub_gpu"}
        models = {m["preset"]: m for m in json.loads((root / "calc" / "data" / "hub_models.json").read_text())["models"]}
        worst = 0.0
        for c in json.loads((root / "calc" / "data" / "hub_gpu_h200.json").read_text())["cases"]:
            hub = c["spec"]["hub"]
            model = models[hub["preset"]]
            logits = (c["config"]["batch_size"] * hub["sequence_length"] * model["backbone"]["vocabulary_size"] * 2
                      if model["task"] == "causal_lm" else 0)
            worst = max(worst, 1 - planned[c["case"]] / (c["peak_bytes"] - logits))
        assert margin.fraction == pytest.approx(worst)
    else:
        from tests.tools import xla_margin

        assert margin.fraction == pytest.approx(xla_margin(0.0))
