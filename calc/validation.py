"""The validation set: real measurements, and the estimate's error on each.

Measured cases live in ``calc/data/validation_cpu.json``, each with the TensorFlow/Keras
versions, device and thread settings they were measured with. ``VALIDATION_CASES`` lists
them; ``benchmarks/measure_validation.py`` measures the missing ones. Beside this set, not
part of it: 50 of its cases with TensorFlow on an H100 (``calc/data/gpu_tf_h100.json``),
22 of them compiled with XLA (``gpu_tf_h100_xla.json``; ``benchmarks/measure_gpu_tf.py``),
and 14 under Keras' JAX backend (``gpu_jax_h100*.json``; ``benchmarks/measure_gpu_jax.py``).
A file whose environment names a GPU is estimated with ``device="gpu"``.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, replace
from itertools import repeat
from pathlib import Path
from typing import Any

from calc.catalogue import ModelFile, ModelSpec, make_spec
from calc.requests import config_from_dict, config_to_dict, spec_from_dict, spec_to_dict
from calc.types import Device, OptimizerOptions, TrainingConfig

DATA_DIR = Path(__file__).parent / "data"
CPU_DATA = DATA_DIR / "validation_cpu.json"
# TensorFlow on an H100: its graph executor (jit_compile=False), and XLA (Keras 3's default there).
GPU_TF_DATA = DATA_DIR / "gpu_tf_h100.json"
GPU_TF_XLA_DATA = DATA_DIR / "gpu_tf_h100_xla.json"
# Models users build themselves, saved as files (benchmarks/custom_models.py writes them).
CUSTOM_DATA = DATA_DIR / "validation_custom_cpu.json"
# The quick mixed_float16 cases again on a CPU with AVX512-FP16 (oneDNN's float16 kernels; stop 17).
FP16_DATA = DATA_DIR / "validation_cpu_fp16.json"
MODEL_FILES_DIR = "calc/data/models"
# The GPU slice under Keras' JAX backend (XLA compiles every step there), without XLA's
# autotuner, whose compile-time workspaces would otherwise be the process peak.
GPU_JAX_DATA = DATA_DIR / "gpu_jax_h100_noautotune.json"


def _case(name, size, batch, optimizer, precision="float32", mode="all", last_n=0, accum=1,
          channels=3, classes=1000, **options):
    """One validation case; ``size`` is a square side or a (height, width) pair."""
    height, width = (size, size) if isinstance(size, int) else size
    spec = make_spec(name, height=height, width=width, channels=channels, classes=classes,
                     include_top=(mode == "all" and not options.pop("head", False)))
    config = TrainingConfig(
        batch_size=batch,
        optimizer=optimizer,
        precision=precision,
        train_mode=mode,
        last_n_layers=last_n,
        gradient_accumulation_steps=accum,
        optimizer_options=OptimizerOptions(**options),
    )
    return spec, config


# 12 catalogue families (all 40 models), batch 1-128, every optimizer family, three precisions, full training,
# frozen backbones, the last N layers and gradient accumulation (289 cases). Sizes are
# chosen so that one case runs in a few minutes at most on a 2-core machine.
VALIDATION_CASES: tuple[tuple[ModelSpec, TrainingConfig], ...] = (
    _case("VGG16", 224, 8, "sgd"),
    _case("VGG16", 224, 8, "adam"),
    _case("VGG19", 160, 4, "sgd", momentum=True),
    _case("VGG16", 224, 16, "adam", mode="frozen_backbone"),
    _case("ResNet50", 224, 16, "adam"),
    _case("ResNet50", 160, 32, "sgd"),
    _case("ResNet50", 224, 1, "sgd"),
    _case("ResNet50", 128, 8, "adamw", "mixed_bfloat16"),
    _case("ResNet50", 224, 16, "adam", mode="frozen_backbone"),
    _case("ResNet101", 128, 8, "rmsprop"),
    _case("ResNet50V2", 160, 16, "nadam"),
    _case("ResNet152V2", 96, 8, "adagrad"),
    _case("ResNet101V2", 160, 8, "sgd", "mixed_float16", momentum=True),
    _case("InceptionV3", 299, 8, "adam"),
    _case("InceptionV3", 160, 32, "sgd", mode="frozen_backbone"),
    _case("InceptionV3", 224, 16, "sgd", "mixed_bfloat16"),
    _case("InceptionResNetV2", 160, 8, "adamax"),
    _case("Xception", 160, 8, "rmsprop", momentum=True),
    _case("Xception", 224, 16, "adam", mode="frozen_backbone"),
    _case("MobileNet", 224, 32, "sgd"),
    _case("MobileNet", 128, 1, "adadelta"),
    _case("MobileNetV2", 224, 32, "adam"),
    _case("MobileNetV2", 160, 64, "sgd", "mixed_float16"),
    _case("MobileNetV2", 224, 16, "adamw", mode="frozen_backbone"),
    _case("MobileNetV3Small", 224, 64, "adam"),
    _case("MobileNetV3Large", 224, 16, "lion"),
    _case("DenseNet121", 224, 16, "adam"),
    _case("DenseNet169", 128, 8, "sgd", momentum=True),
    _case("DenseNet201", 160, 4, "ftrl"),
    _case("DenseNet121", 224, 32, "sgd", mode="frozen_backbone"),
    _case("NASNetMobile", 224, 16, "adam"),
    _case("EfficientNetB0", 224, 32, "adam"),
    _case("EfficientNetB0", 224, 16, "adam", "mixed_bfloat16"),
    _case("EfficientNetB3", 300, 8, "rmsprop"),
    _case("EfficientNetB0", 224, 64, "adam", mode="frozen_backbone"),
    _case("EfficientNetB1", 240, 16, "adam", use_ema=True),
    _case("EfficientNetV2B0", 224, 16, "adamw"),
    _case("EfficientNetV2S", 256, 8, "adafactor"),
    _case("EfficientNetV2B2", 260, 8, "adam", "mixed_float16"),
    _case("ConvNeXtTiny", 224, 8, "adamw"),
    _case("ConvNeXtTiny", 128, 16, "lion", "mixed_bfloat16"),
    _case("ConvNeXtSmall", 224, 4, "adam", mode="frozen_backbone"),
    _case("ConvNeXtBase", 96, 1, "adam"),
    _case("ResNet50", 224, 32, "adam"),
    # Frozen backbones at the batches where the measured peak jumps (a freed chunk is
    # handed out unsplit, docs/BFC_SIM.md sweeps): a plan linear in the batch misses them.
    _case("MobileNetV2", 224, 28, "adamw", mode="frozen_backbone"),
    _case("DenseNet121", 224, 24, "sgd", mode="frozen_backbone"),
    _case("ResNet50", 224, 24, "adam", mode="frozen_backbone"),
    _case("Xception", 224, 24, "adam", mode="frozen_backbone"),
    # A holdout: 14 configurations chosen without looking at the engine, measured after
    # the allocator simulation went in and before any tuning on them (their first
    # errors are in docs/MEASUREMENTS.md).
    _case("MobileNetV3Large", 224, 32, "sgd", mode="frozen_backbone"),
    _case("EfficientNetV2B1", 240, 12, "adam", mode="frozen_backbone"),
    _case("ResNet101", 224, 20, "rmsprop", mode="frozen_backbone"),
    _case("DenseNet169", 224, 12, "adamw", mode="frozen_backbone"),
    _case("InceptionResNetV2", 299, 8, "adam", mode="frozen_backbone"),
    _case("NASNetMobile", 224, 32, "sgd", mode="frozen_backbone"),
    _case("ConvNeXtTiny", 224, 16, "adamw", mode="frozen_backbone"),
    _case("VGG19", 224, 12, "sgd", mode="frozen_backbone"),
    _case("ResNet152", 160, 8, "adam"),
    _case("EfficientNetB2", 260, 6, "nadam"),
    _case("MobileNetV2", 192, 48, "rmsprop"),
    _case("Xception", 299, 4, "adamw", "mixed_bfloat16"),
    _case("DenseNet121", 160, 24, "sgd", "mixed_float16", momentum=True),
    _case("VGG16", 128, 32, "adagrad"),
    # Frozen backbones under mixed precision (none above), measured after the holdout.
    _case("ResNet50", 224, 16, "adam", "mixed_float16", mode="frozen_backbone"),
    _case("EfficientNetB0", 224, 32, "sgd", "mixed_bfloat16", mode="frozen_backbone"),
    _case("MobileNetV2", 160, 48, "adam", "mixed_float16", mode="frozen_backbone"),
    # The last N layers trained (none above), measured after everything before them.
    _case("ResNet50", 224, 16, "adam", mode="last_n", last_n=20),
    _case("EfficientNetB0", 224, 32, "sgd", mode="last_n", last_n=30, momentum=True),
    _case("MobileNetV2", 224, 32, "rmsprop", mode="last_n", last_n=10),
    # A second holdout, measured at stop 8 before any change made on it (first errors
    # in docs/MEASUREMENTS.md): configurations and families with no case before.
    _case("NASNetLarge", 224, 8, "sgd", mode="frozen_backbone"),
    _case("EfficientNetB4", 224, 8, "rmsprop", centered=True),
    _case("ResNet101", 224, 16, "sgd"),
    _case("MobileNetV2", 224, 32, "sgd", "mixed_float16", momentum=True),
    _case("ConvNeXtTiny", 160, 8, "adam", "mixed_float16"),
    _case("InceptionV3", 299, 16, "adam", mode="frozen_backbone"),
    _case("Xception", 224, 8, "sgd"),
    _case("EfficientNetV2B3", 224, 8, "adam", "mixed_bfloat16"),
    _case("VGG16", 224, 16, "sgd", momentum=True),
    _case("VGG19", 224, 4, "adam"),
    _case("ResNet50", 224, 64, "sgd", "mixed_float16", mode="frozen_backbone"),
    _case("MobileNetV3Small", 224, 64, "adam", mode="frozen_backbone"),
    _case("NASNetMobile", 224, 16, "adam", amsgrad=True),
    _case("DenseNet201", 224, 8, "adagrad", mode="frozen_backbone"),
    _case("EfficientNetB5", 224, 4, "nadam", mode="frozen_backbone"),
    _case("ResNet152V2", 224, 8, "adamax"),
    _case("MobileNet", 224, 16, "adam", "mixed_bfloat16", mode="frozen_backbone"),
    _case("InceptionResNetV2", 299, 4, "sgd"),
    # Gradient accumulation (the measured step is one that applies the update).
    _case("ResNet50", 160, 16, "adam", accum=4),
    _case("MobileNetV2", 224, 32, "sgd", accum=2, momentum=True),
    _case("EfficientNetB0", 224, 16, "adamw", "mixed_bfloat16", accum=2),
    # A third holdout, measured at stop 8 after the engine's last change, nothing tuned
    # on it (out-of-sample figures in docs/MEASUREMENTS.md).
    _case("ResNet50V2", 224, 16, "sgd", mode="frozen_backbone"),
    _case("DenseNet169", 160, 16, "adam", "mixed_bfloat16"),
    _case("EfficientNetB1", 160, 16, "sgd", momentum=True),
    _case("MobileNetV3Large", 224, 32, "adamw", "mixed_float16", mode="frozen_backbone"),
    _case("InceptionV3", 224, 8, "rmsprop"),
    _case("ConvNeXtSmall", 128, 8, "adamw", "mixed_bfloat16"),
    _case("Xception", 299, 8, "nadam", mode="frozen_backbone"),
    _case("ResNet152", 224, 8, "sgd", momentum=True),
    _case("EfficientNetV2S", 224, 8, "adam", mode="frozen_backbone"),
    _case("VGG16", 160, 16, "adamw"),
    _case("MobileNetV2", 160, 16, "lion"),
    _case("NASNetMobile", 224, 32, "adamax", mode="frozen_backbone"),
    _case("ResNet101V2", 224, 8, "adam", "mixed_bfloat16"),
    _case("EfficientNetB2", 260, 8, "adagrad", mode="frozen_backbone"),
    # Small images, where weights, gradients and optimizer state weigh most (stop 8,
    # after the last change; one-run first errors in docs/MEASUREMENTS.md).
    _case("ResNet50", 64, 64, "adam"),
    _case("VGG16", 64, 32, "sgd"),
    _case("EfficientNetB0", 96, 64, "rmsprop"),
    _case("DenseNet121", 64, 32, "nadam"),
    _case("MobileNetV3Small", 96, 64, "sgd", momentum=True),
    # A fourth holdout, measured at stop 9 before any change made on it (first errors in
    # docs/MEASUREMENTS.md): models and combinations no case had.
    _case("EfficientNetV2M", 224, 4, "adam", mode="frozen_backbone"),
    _case("ConvNeXtBase", 160, 4, "sgd", "mixed_bfloat16", momentum=True),
    _case("EfficientNetB6", 224, 4, "sgd", mode="frozen_backbone"),
    _case("VGG19", 160, 8, "rmsprop", "mixed_float16"),
    _case("ResNet50V2", 224, 32, "adamw", "mixed_bfloat16"),
    _case("DenseNet201", 224, 8, "adam", "mixed_float16"),
    _case("MobileNetV3Small", 224, 48, "ftrl"),
    _case("InceptionResNetV2", 224, 16, "adam", "mixed_bfloat16", mode="frozen_backbone"),
    _case("Xception", 224, 12, "sgd", "mixed_float16", mode="frozen_backbone"),
    _case("NASNetMobile", 224, 8, "lion"),
    _case("EfficientNetB3", 224, 16, "adamw", mode="last_n", last_n=50),
    _case("MobileNet", 160, 64, "rmsprop"),
    _case("ResNet101V2", 224, 24, "sgd", mode="frozen_backbone"),
    _case("InceptionV3", 299, 8, "adadelta"),
    # A fifth holdout, measured at stop 10 before any change made on it (first errors in
    # docs/MEASUREMENTS.md): non-square images, one input channel, 10 classes, centered
    # RMSprop, EMA and Adafactor on new families, Lion under bf16, a frozen NASNet in f16.
    _case("ResNet50", (192, 128), 16, "sgd", momentum=True),
    _case("MobileNetV2", (224, 160), 24, "adam", "mixed_float16"),
    _case("EfficientNetB0", 224, 16, "adamw", channels=1),
    _case("DenseNet121", 128, 32, "rmsprop", classes=10, centered=True),
    _case("VGG16", (224, 160), 16, "adam", mode="frozen_backbone", classes=10),
    _case("ConvNeXtTiny", 128, 8, "adamax", "mixed_float16"),
    _case("Xception", 160, 16, "adam", use_ema=True),
    _case("InceptionV3", (160, 224), 8, "adafactor"),
    _case("ResNet101", 160, 32, "lion", "mixed_bfloat16", mode="frozen_backbone"),
    _case("EfficientNetV2B2", 192, 16, "nadam"),
    _case("MobileNetV3Large", 160, 64, "sgd", mode="frozen_backbone", classes=10),
    _case("NASNetMobile", 224, 8, "adagrad", "mixed_float16", mode="frozen_backbone"),
    _case("ResNet152V2", 224, 16, "sgd", mode="last_n", last_n=30, momentum=True),
    _case("DenseNet169", (96, 160), 16, "ftrl", channels=1),
    # Chosen at stop 10 where the allocator simulation and the walk disagree most on
    # ConvNeXt (XLA's dense filter gradient, a single request of 220-390 MiB, can be handed
    # a chunk up to 128 MiB larger), measured before the engine used the simulation there.
    _case("ConvNeXtTiny", 224, 1, "adamax", "mixed_bfloat16"),
    _case("ConvNeXtBase", 128, 1, "sgd"),
    _case("ConvNeXtTiny", 128, 8, "adam", "mixed_bfloat16"),
    _case("ConvNeXtTiny", 96, 1, "sgd"),
    _case("ConvNeXtSmall", 128, 1, "adam"),
    # A sixth holdout, measured at stop 10 after its last engine change, before anything
    # was changed on it (first errors in docs/MEASUREMENTS.md): common setups at larger
    # batches and full resolution.
    _case("ResNet50", 224, 32, "sgd", "mixed_float16", momentum=True),
    _case("EfficientNetB0", 224, 48, "adam", "mixed_bfloat16"),
    _case("MobileNetV2", 224, 48, "adamw"),
    _case("DenseNet121", 224, 8, "rmsprop", "mixed_bfloat16"),
    _case("InceptionV3", 299, 16, "sgd"),
    _case("Xception", 299, 8, "adamw"),
    _case("ResNet101V2", 224, 16, "nadam"),
    _case("VGG19", 224, 8, "sgd", mode="frozen_backbone", momentum=True),
    _case("EfficientNetV2S", 384, 4, "adam", mode="frozen_backbone"),
    _case("ConvNeXtTiny", 224, 4, "lion"),
    _case("NASNetMobile", 224, 32, "sgd"),
    _case("MobileNetV3Small", 224, 64, "adamax"),
    _case("ResNet50", 224, 48, "adam", "mixed_float16", mode="frozen_backbone"),
    _case("EfficientNetB2", 260, 16, "adagrad", mode="last_n", last_n=40),
    # A seventh holdout, measured at stop 11 before any change made on it (first errors
    # in docs/MEASUREMENTS.md): the largest catalogue models, none measured before
    # (ConvNeXt Large/XLarge, EfficientNetV2L, EfficientNetB7, NASNetLarge with its top),
    # and heavier common setups (batch 32 on ResNet152, VGG16 and DenseNet201).
    _case("ConvNeXtLarge", 160, 4, "adamw"),
    _case("ConvNeXtXLarge", 128, 2, "sgd"),
    _case("EfficientNetV2L", 224, 4, "rmsprop"),
    _case("EfficientNetB7", 224, 4, "adam", "mixed_float16"),
    _case("NASNetLarge", 331, 2, "adam"),
    _case("InceptionResNetV2", 299, 8, "sgd", momentum=True),
    _case("ResNet152", 224, 32, "adam"),
    _case("EfficientNetV2M", 480, 2, "adam", "mixed_bfloat16"),
    _case("DenseNet201", 224, 32, "sgd", momentum=True),
    _case("ResNet50", 224, 16, "adamw", accum=2),
    _case("EfficientNetB4", 380, 16, "adam", mode="frozen_backbone"),
    _case("MobileNetV2", 224, 64, "sgd", mode="last_n", last_n=20),
    _case("VGG16", 224, 32, "adam", "mixed_bfloat16"),
    _case("Xception", 299, 32, "nadam", "mixed_float16", mode="frozen_backbone"),
    # An eighth holdout, measured at stop 11 before any change made on it: transfer
    # learning at the batches people use it with (32-128), where the early feature maps
    # pass the 128 MiB above which the allocator always splits a chunk.
    _case("ResNet50", 224, 128, "adam", mode="frozen_backbone"),
    _case("EfficientNetB0", 224, 128, "adam", mode="frozen_backbone"),
    _case("MobileNetV2", 224, 128, "sgd", "mixed_float16", mode="frozen_backbone"),
    _case("InceptionV3", 299, 64, "adam", mode="frozen_backbone"),
    _case("DenseNet121", 224, 64, "adam", mode="frozen_backbone"),
    _case("VGG16", 224, 64, "sgd", mode="frozen_backbone", momentum=True),
    _case("EfficientNetV2B0", 224, 96, "adamw", mode="frozen_backbone"),
    _case("ConvNeXtTiny", 224, 64, "adamw", mode="frozen_backbone"),
    _case("ResNet101V2", 224, 64, "rmsprop", "mixed_bfloat16", mode="frozen_backbone"),
    _case("MobileNetV3Large", 224, 128, "adam", mode="last_n", last_n=30),
    _case("ResNet50", 224, 64, "adam", mode="last_n", last_n=33),
    _case("EfficientNetB3", 300, 32, "adam", mode="frozen_backbone"),
    # A ninth holdout, measured at stop 11 before any change made on it: the optimizers
    # under mixed precision that no case had (Adadelta, Adafactor, Ftrl, Adagrad, Nadam,
    # AMSGrad, EMA, RMSprop with momentum or centered, Lion under float16), and Lamb.
    _case("ResNet50", 160, 16, "lamb"),
    _case("MobileNetV2", 224, 32, "lamb", "mixed_bfloat16"),
    _case("EfficientNetB0", 224, 16, "adadelta", "mixed_float16"),
    _case("ResNet50", 224, 16, "adafactor", "mixed_bfloat16"),
    _case("DenseNet121", 160, 16, "ftrl", "mixed_float16"),
    _case("InceptionV3", 224, 16, "adagrad", "mixed_bfloat16"),
    _case("ResNet101V2", 160, 16, "nadam", "mixed_float16"),
    _case("Xception", 224, 8, "adam", "mixed_bfloat16", amsgrad=True),
    _case("MobileNetV3Large", 224, 32, "adam", "mixed_float16", use_ema=True),
    _case("EfficientNetV2B0", 224, 16, "rmsprop", "mixed_bfloat16", momentum=True),
    _case("ResNet50V2", 224, 8, "lion", "mixed_float16"),
    _case("NASNetMobile", 224, 16, "rmsprop", "mixed_float16", centered=True),
    _case("ResNet50", 224, 32, "lamb", mode="frozen_backbone"),
    _case("MobileNetV2", 224, 32, "adadelta", mode="frozen_backbone"),
    # A tenth holdout, drawn at random at stop 12 (`python benchmarks/sample_holdout.py
    # --seed 12 --count 14`: every catalogue model, batch 1-64, every optimizer and its
    # options, the three precisions, all three training modes), measured before any
    # change made on it.
    _case("NASNetMobile", 128, 32, "rmsprop", precision="mixed_bfloat16"),
    _case("MobileNet", 64, 48, "rmsprop", precision="float32", centered=True, last_n=40, mode="last_n"),
    _case("ResNet50", 96, 24, "adadelta", precision="float32"),
    _case("VGG19", 160, 16, "rmsprop", precision="mixed_float16", mode="frozen_backbone"),
    _case("EfficientNetV2B3", 96, 16, "adamw", precision="mixed_bfloat16", mode="frozen_backbone"),
    _case("EfficientNetB3", 160, 1, "lion", precision="mixed_float16", use_ema=True, mode="frozen_backbone"),
    _case("EfficientNetV2L", 192, 4, "adam", precision="mixed_float16"),
    _case("MobileNetV3Small", 128, 8, "adadelta", precision="mixed_bfloat16", last_n=40, mode="last_n"),
    _case("ResNet152", (128, 64), 32, "sgd", precision="float32", momentum=True),
    _case("ResNet50V2", 192, 12, "adamax", precision="mixed_bfloat16", accum=4),
    _case("InceptionResNetV2", 256, 2, "nadam", precision="float32", mode="frozen_backbone"),
    _case("MobileNetV2", 192, 64, "ftrl", precision="float32", mode="frozen_backbone"),
    _case("ResNet152V2", 160, 12, "adafactor", precision="mixed_bfloat16"),
    _case("DenseNet121", 224, 4, "rmsprop", precision="mixed_bfloat16", momentum=True, mode="frozen_backbone"),
    # An eleventh holdout, drawn the same way (`--seed 13`) after the engine's last change at
    # stop 12 (early temporaries counted at three quarters), measured before any change.
    _case("EfficientNetV2B0", 128, 2, "rmsprop", precision="float32", classes=10, mode="frozen_backbone"),
    _case("ResNet152V2", 96, 4, "adadelta", precision="mixed_bfloat16", mode="frozen_backbone"),
    _case("DenseNet121", 128, 32, "sgd", precision="mixed_float16", mode="frozen_backbone"),
    _case("ResNet50V2", 160, 8, "ftrl", precision="mixed_float16", mode="frozen_backbone"),
    _case("MobileNetV3Small", 192, 32, "adagrad", precision="mixed_bfloat16", mode="frozen_backbone"),
    _case("EfficientNetV2S", 192, 6, "adamax", precision="float32"),
    _case("InceptionResNetV2", (128, 256), 24, "rmsprop", precision="float32", last_n=20, mode="last_n"),
    _case("EfficientNetV2B0", 96, 32, "sgd", precision="float32", mode="frozen_backbone"),
    _case("EfficientNetB0", 224, 12, "sgd", precision="mixed_bfloat16"),
    _case("EfficientNetV2M", 96, 24, "adagrad", precision="mixed_float16"),
    _case("ResNet152", 128, 6, "adadelta", precision="mixed_float16", use_ema=True),
    _case("EfficientNetB5", 192, 6, "ftrl", precision="mixed_bfloat16", last_n=20, mode="last_n"),
    _case("EfficientNetV2B0", 160, 2, "adamw", precision="mixed_bfloat16", channels=1),
    _case("ResNet152", 160, 1, "adagrad", precision="float32"),
    # Steps whose peak is the update under mixed_float16 (big models at small images and
    # batches), chosen at stop 12 after BRANCH_TEMPORARIES went in and measured before any
    # change made on them: the out-of-sample check of that change.
    _case("ResNet101", 128, 2, "sgd", "mixed_float16", momentum=True),
    _case("ResNet50", 96, 4, "adam", "mixed_float16"),
    _case("EfficientNetB4", 128, 2, "nadam", "mixed_float16"),
    _case("InceptionResNetV2", 128, 2, "rmsprop", "mixed_float16"),
    _case("DenseNet201", 96, 2, "adagrad", "mixed_float16"),
    _case("Xception", 96, 4, "ftrl", "mixed_float16"),
    _case("ResNet152V2", 96, 2, "lion", "mixed_float16"),
    _case("EfficientNetV2S", 128, 2, "adamax", "mixed_float16"),
    _case("MobileNetV2", 96, 2, "adadelta", "mixed_float16"),
    _case("ResNet50V2", 64, 8, "rmsprop", "mixed_float16", centered=True),
    _case("VGG16", 64, 4, "lamb", "mixed_float16"),
    _case("NASNetMobile", 96, 4, "adam", "mixed_float16", use_ema=True),
    # A twelfth holdout, drawn at stop 13 after the float16 CPU kernels' temporaries went in
    # (calc.kernels), measured before any change made on it: `python benchmarks/sample_holdout.py
    # --seed 14 --count 14 --max-peak-gib 1.0 --precision mixed_float16 --trained`.
    _case('EfficientNetV2B1', (96, 64), 24, 'adafactor', precision='mixed_float16'),
    _case('VGG19', 64, 8, 'rmsprop', precision='mixed_float16'),
    _case('MobileNetV3Small', 192, 16, 'adamax', precision='mixed_float16', classes=10),
    _case('DenseNet201', 224, 24, 'adafactor', precision='mixed_float16', last_n=60, mode='last_n'),
    _case('MobileNetV3Large', 160, 4, 'adafactor', precision='mixed_float16', classes=10),
    _case('DenseNet169', 96, 8, 'sgd', precision='mixed_float16'),
    _case('ConvNeXtTiny', 224, 2, 'rmsprop', precision='mixed_float16', centered=True),
    _case('EfficientNetB3', 224, 8, 'lion', precision='mixed_float16', classes=10),
    _case('EfficientNetV2B1', 96, 2, 'adam', precision='mixed_float16', amsgrad=True),
    _case('MobileNetV3Small', 192, 48, 'adafactor', precision='mixed_float16', accum=2),
    _case('InceptionV3', 128, 2, 'adagrad', precision='mixed_float16', last_n=10, channels=1, mode='last_n'),
    _case('ResNet50', 192, 12, 'adafactor', precision='mixed_float16', channels=1),
    _case('EfficientNetV2B1', (160, 64), 16, 'ftrl', precision='mixed_float16'),
    _case('EfficientNetV2B0', 96, 64, 'adadelta', precision='mixed_float16', classes=10),
    # Small mixed_float16 steps where the float16 kernels' buffers are a large share of the
    # peak, picked at stop 13 from a scan of the engine's change (old and new predictions in
    # the commit message), measured before any change made on them. Batch 1 included: the
    # input gradient then uses a one-image buffer.
    _case("MobileNetV3Small", 128, 2, "sgd", "mixed_float16"),
    _case("NASNetMobile", 64, 8, "adam", "mixed_float16"),
    _case("EfficientNetB0", 96, 1, "sgd", "mixed_float16"),
    _case("DenseNet121", 64, 2, "adamw", "mixed_float16"),
    _case("EfficientNetV2B0", 128, 1, "rmsprop", "mixed_float16"),
    _case("MobileNetV3Large", 96, 2, "adagrad", "mixed_float16"),
    _case("MobileNet", 96, 2, "sgd", "mixed_float16", momentum=True),
    _case("ResNet50", 64, 1, "sgd", "mixed_float16"),
    _case("MobileNetV2", 96, 4, "adam", "mixed_float16", last_n=20, mode="last_n"),
    _case("Xception", 71, 2, "sgd", "mixed_float16"),
    # VGG16 with its top under mixed_float16, where the float16 MatMul's float32 copy of fc1's
    # kernel (392 / 200 MiB) moves the prediction most (+20 %), measured before any change.
    _case("VGG16", 224, 4, "sgd", "mixed_float16"),
    _case("VGG16", 160, 16, "sgd", "mixed_float16"),
    # A thirteenth holdout, drawn at stop 13 to choose between the walk and the larger of the
    # walk and the allocator simulation for mixed_float16 full training (both predictions in the
    # commit message), measured before the choice: `python benchmarks/sample_holdout.py
    # --seed 15 --count 14 --max-peak-gib 1.0 --precision mixed_float16 --trained`.
    _case('EfficientNetB5', 64, 12, 'adadelta', precision='mixed_float16', last_n=10, mode='last_n'),
    _case('MobileNetV2', 96, 24, 'ftrl', precision='mixed_float16'),
    _case('MobileNet', 64, 8, 'adadelta', precision='mixed_float16'),
    _case('ResNet101V2', 96, 24, 'lion', precision='mixed_float16'),
    _case('EfficientNetV2B2', 64, 24, 'adamax', precision='mixed_float16'),
    _case('MobileNetV3Large', (160, 224), 6, 'adamw', precision='mixed_float16'),
    _case('Xception', 224, 4, 'nadam', precision='mixed_float16', accum=2),
    _case('NASNetLarge', 128, 8, 'rmsprop', precision='mixed_float16', last_n=40, channels=1, mode='last_n'),
    _case('NASNetMobile', 128, 2, 'nadam', precision='mixed_float16'),
    _case('MobileNet', 224, 6, 'lamb', precision='mixed_float16', last_n=40, mode='last_n'),
    _case('MobileNet', 224, 12, 'lamb', precision='mixed_float16'),
    _case('DenseNet169', 96, 8, 'rmsprop', precision='mixed_float16'),
    _case('ResNet152V2', 160, 32, 'adam', precision='mixed_float16', last_n=10, mode='last_n'),
    _case('ResNet101V2', 64, 48, 'adadelta', precision='mixed_float16', classes=10),
    # A fourteenth holdout, drawn (stop 15, `sample_holdout.py --seed 16 --count 14 --max-peak-gib 1.0
    # --trained`), predicted with and without the full-training simulation floor before measuring.
    _case('EfficientNetB1', 224, 1, 'adam', precision='float32', amsgrad=True, use_ema=True),
    _case('MobileNet', 160, 32, 'lamb', precision='float32'),
    _case('InceptionV3', 96, 4, 'adafactor', precision='float32'),
    _case('EfficientNetB0', 160, 1, 'adam', precision='float32'),
    _case('NASNetMobile', 96, 1, 'lion', precision='mixed_bfloat16'),
    _case('NASNetLarge', 96, 6, 'sgd', precision='float32'),
    _case('EfficientNetV2B1', 192, 4, 'lion', precision='mixed_float16'),
    _case('EfficientNetB2', 256, 6, 'adadelta', precision='mixed_float16'),
    _case('VGG16', 96, 12, 'sgd', precision='mixed_float16'),
    _case('MobileNetV3Small', 224, 16, 'rmsprop', precision='mixed_float16', momentum=True, last_n=10, mode='last_n'),
    _case('EfficientNetV2S', (64, 96), 6, 'sgd', precision='mixed_float16', momentum=True),
    _case('MobileNet', 96, 32, 'lamb', precision='mixed_float16', use_ema=True, last_n=10, mode='last_n'),
    _case('MobileNetV2', (192, 96), 24, 'sgd', precision='float32', momentum=True),
    _case('EfficientNetB0', 96, 16, 'ftrl', precision='mixed_float16', classes=10),
    # A fifteenth holdout, drawn (stop 16, `sample_holdout.py --seed 17 --count 14 --max-peak-gib 1.0`),
    # predicted before measuring (the predictions are in the message of the commit that added it).
    _case('ResNet152', 160, 6, 'adamw', precision='mixed_bfloat16', amsgrad=True, mode='frozen_backbone'),
    _case('InceptionV3', 299, 16, 'adamax', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('ConvNeXtLarge', 160, 1, 'adadelta', precision='float32', mode='frozen_backbone'),
    _case('MobileNet', 96, 32, 'adam', precision='mixed_float16'),
    _case('EfficientNetB0', 128, 12, 'adamw', precision='mixed_bfloat16', amsgrad=True, last_n=30, classes=10, mode='last_n'),
    _case('DenseNet201', (96, 192), 8, 'adamax', precision='mixed_float16', last_n=10, mode='last_n'),
    _case('EfficientNetB2', 256, 24, 'sgd', precision='float32', mode='frozen_backbone'),
    _case('MobileNetV3Large', 64, 6, 'adamw', precision='float32', last_n=60, classes=10, mode='last_n'),
    _case('EfficientNetV2B3', 256, 4, 'nadam', precision='float32', use_ema=True),
    _case('MobileNetV3Small', 160, 24, 'lion', precision='mixed_float16', accum=4, classes=10),
    _case('EfficientNetV2M', 224, 8, 'adamax', precision='float32', use_ema=True, channels=1, mode='frozen_backbone'),
    _case('Xception', 128, 6, 'adafactor', precision='float32', mode='frozen_backbone'),
    _case('ConvNeXtLarge', 160, 8, 'ftrl', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2S', 224, 2, 'nadam', precision='mixed_float16', last_n=10, mode='last_n'),
    # A sixteenth holdout, drawn (stop 17, `sample_holdout.py --seed 18 --count 14 --max-peak-gib 1.0
    # --trained --precision float32`) after the full-training floor went in, predicted (the walk alone
    # and the engine, in the commit message) before measuring, on this stop's AVX512-FP16 CPU.
    _case('EfficientNetV2M', 256, 2, 'sgd', precision='float32'),
    _case('MobileNetV3Large', 96, 64, 'lamb', precision='float32', last_n=60, mode='last_n'),
    _case('InceptionV3', (192, 256), 4, 'ftrl', precision='float32'),
    _case('MobileNetV3Large', 224, 1, 'adadelta', precision='float32'),
    _case('InceptionResNetV2', 96, 32, 'adafactor', precision='float32', last_n=20, mode='last_n'),
    _case('EfficientNetV2B0', 192, 4, 'lion', precision='float32'),
    _case('DenseNet121', 96, 24, 'lion', precision='float32'),
    _case('ResNet152', 192, 4, 'adadelta', precision='float32', last_n=20, mode='last_n'),
    _case('EfficientNetB5', 64, 8, 'sgd', precision='float32', momentum=True, last_n=10, channels=1, mode='last_n'),
    _case('EfficientNetV2S', 160, 6, 'adafactor', precision='float32', accum=4),
    _case('ConvNeXtTiny', 96, 8, 'sgd', precision='float32', momentum=True),
    _case('EfficientNetV2B2', 128, 6, 'lamb', precision='float32', classes=10),
    _case('NASNetMobile', 128, 32, 'adam', precision='float32'),
    _case('EfficientNetB6', 256, 1, 'adafactor', precision='float32'),
    # A seventeenth holdout, drawn (stop 18, `sample_holdout.py --seed 19 --count 14 --max-peak-gib 1.0
    # --precision float32`: frozen, last-N and full training), predicted (in the commit message)
    # before measuring, on an AVX512-FP16 / AMX CPU; the engine unchanged since the sixteenth.
    _case('EfficientNetV2B1', 64, 24, 'adamax', precision='float32', use_ema=True, classes=10, mode='frozen_backbone'),
    _case('InceptionV3', 299, 8, 'adafactor', precision='float32'),
    _case('ResNet50V2', 192, 64, 'rmsprop', precision='float32', centered=True, classes=10, mode='frozen_backbone'),
    _case('EfficientNetV2B0', 96, 1, 'lamb', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2B1', (64, 96), 2, 'ftrl', precision='float32'),
    _case('ResNet152', 128, 2, 'nadam', precision='float32', classes=10),
    _case('ResNet101V2', 192, 24, 'adamax', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2M', 96, 1, 'rmsprop', precision='float32', use_ema=True),
    _case('EfficientNetV2B2', 128, 2, 'adam', precision='float32'),
    _case('EfficientNetV2B2', 64, 12, 'lamb', precision='float32', mode='frozen_backbone'),
    _case('DenseNet169', 224, 48, 'adagrad', precision='float32', last_n=60, mode='last_n'),
    _case('MobileNetV3Small', 64, 1, 'nadam', precision='float32', use_ema=True),
    _case('NASNetMobile', 64, 2, 'ftrl', precision='float32', channels=1),
    _case('EfficientNetV2B1', 96, 8, 'sgd', precision='float32'),
    # An eighteenth (stop 18, `sample_holdout.py --seed 20 --count 14 --max-peak-gib 1.0 --precision
    # mixed_bfloat16`), predicted (in the commit message) before measuring, after the GPU-only change of
    # this stop (the CPU estimate is the seventeenth's engine).
    _case('EfficientNetB1', 128, 12, 'adafactor', precision='mixed_bfloat16', accum=4, classes=10),
    _case('NASNetMobile', 192, 24, 'adam', precision='mixed_bfloat16', amsgrad=True, mode='frozen_backbone'),
    _case('MobileNet', 64, 48, 'adam', precision='mixed_bfloat16', amsgrad=True, use_ema=True),
    _case('EfficientNetB0', 192, 8, 'adam', precision='mixed_bfloat16', amsgrad=True, classes=10),
    _case('ConvNeXtBase', 224, 24, 'rmsprop', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    _case('ResNet50', (128, 192), 1, 'sgd', precision='mixed_bfloat16', momentum=True, mode='frozen_backbone'),
    _case('EfficientNetB4', 160, 4, 'sgd', precision='mixed_bfloat16', momentum=True, use_ema=True, mode='frozen_backbone'),
    _case('MobileNetV2', (128, 64), 24, 'adam', precision='mixed_bfloat16', amsgrad=True),
    _case('ResNet101', 64, 64, 'rmsprop', precision='mixed_bfloat16', momentum=True, use_ema=True, mode='frozen_backbone'),
    _case('DenseNet169', 64, 24, 'ftrl', precision='mixed_bfloat16', last_n=40, classes=10, mode='last_n'),
    _case('EfficientNetB5', 64, 4, 'lion', precision='mixed_bfloat16', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetV2B1', 128, 48, 'adafactor', precision='mixed_bfloat16', use_ema=True, last_n=20, mode='last_n'),
    _case('DenseNet121', 192, 32, 'adamax', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('MobileNet', 160, 24, 'lamb', precision='mixed_bfloat16', use_ema=True, mode='frozen_backbone'),
    # A nineteenth (stop 19, `sample_holdout.py --seed 21 --count 14 --max-peak-gib 1.0 --precision
    # float32`), predicted (in the commit message) before measuring, after this stop's CPU change
    # (frozen steps: fused pads and biased convs, oneDNN-rewritten ops first).
    _case('EfficientNetB2', 160, 1, 'rmsprop', precision='float32', momentum=True),
    _case('EfficientNetB2', 192, 6, 'ftrl', precision='float32', classes=10),
    _case('EfficientNetV2B2', 128, 24, 'lion', precision='float32', last_n=30, channels=1, classes=10, mode='last_n'),
    _case('EfficientNetV2B2', 64, 24, 'adagrad', precision='float32', mode='frozen_backbone'),
    _case('ConvNeXtLarge', 128, 2, 'rmsprop', precision='float32', momentum=True, classes=10, mode='frozen_backbone'),
    _case('EfficientNetB3', 64, 24, 'adagrad', precision='float32', use_ema=True),
    _case('EfficientNetB7', 256, 1, 'sgd', precision='float32'),
    _case('ResNet101V2', 192, 48, 'lion', precision='float32', classes=10, mode='frozen_backbone'),
    _case('EfficientNetV2L', 160, 24, 'adamw', precision='float32', channels=1, mode='frozen_backbone'),
    _case('DenseNet121', 64, 48, 'lamb', precision='float32', mode='frozen_backbone'),
    _case('VGG19', 224, 1, 'adamax', precision='float32', last_n=30, mode='last_n'),
    _case('DenseNet169', 96, 8, 'adam', precision='float32'),
    _case('EfficientNetB3', 256, 12, 'adafactor', precision='float32', last_n=30, mode='last_n'),
    _case('ResNet50', 96, 16, 'nadam', precision='float32', classes=10, mode='frozen_backbone'),
    # A twentieth (stop 19, `sample_holdout.py --seed 22 --count 14 --max-peak-gib 1.0 --precision
    # mixed_bfloat16`), predicted (in the commit message) before measuring, after this stop's changes
    # (the fusions, oneDNN-first order, variables in their simulated chunks when part is frozen).
    _case('EfficientNetB0', (96, 160), 8, 'adagrad', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    _case('ConvNeXtTiny', 128, 1, 'adagrad', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    _case('Xception', 160, 8, 'ftrl', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('EfficientNetB3', (256, 64), 4, 'ftrl', precision='mixed_bfloat16'),
    _case('DenseNet121', 64, 6, 'adamw', precision='mixed_bfloat16', amsgrad=True, classes=10),
    _case('EfficientNetB2', 64, 64, 'adamw', precision='mixed_bfloat16', amsgrad=True, channels=1, mode='frozen_backbone'),
    _case('EfficientNetB4', (96, 256), 32, 'adafactor', precision='mixed_bfloat16', last_n=10, mode='last_n'),
    _case('EfficientNetB0', 192, 48, 'rmsprop', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    _case('EfficientNetV2B0', (64, 192), 2, 'adamw', precision='mixed_bfloat16', classes=10),
    _case('MobileNet', (128, 192), 1, 'adagrad', precision='mixed_bfloat16', use_ema=True, accum=2),
    _case('MobileNetV2', 160, 12, 'adam', precision='mixed_bfloat16', amsgrad=True, last_n=20, mode='last_n'),
    _case('ConvNeXtTiny', 64, 1, 'nadam', precision='mixed_bfloat16', channels=1, mode='frozen_backbone'),
    _case('EfficientNetB3', 192, 64, 'adamw', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('DenseNet201', 64, 32, 'adamw', precision='mixed_bfloat16'),
    # A twenty-first (stop 19, `sample_holdout.py --seed 23 --count 14 --max-peak-gib 1.0 --precision
    # float32`), predicted (in the commit message) before measuring, with every change of this stop.
    _case('NASNetLarge', (64, 299), 1, 'ftrl', precision='float32', use_ema=True, classes=10, mode='frozen_backbone'),
    _case('VGG16', 128, 48, 'nadam', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2B2', 224, 4, 'nadam', precision='float32', use_ema=True),
    _case('EfficientNetV2M', 96, 2, 'adamax', precision='float32', mode='frozen_backbone'),
    _case('Xception', 299, 1, 'lamb', precision='float32', classes=10),
    _case('MobileNetV3Small', (224, 64), 8, 'ftrl', precision='float32'),
    _case('MobileNetV2', 96, 8, 'sgd', precision='float32', use_ema=True, last_n=20, mode='last_n'),
    _case('ResNet50', 192, 16, 'adamax', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetB7', 128, 24, 'adafactor', precision='float32', mode='frozen_backbone'),
    _case('MobileNetV3Small', 224, 24, 'adamw', precision='float32', classes=10),
    _case('MobileNetV3Large', 64, 32, 'adamax', precision='float32', classes=10, mode='frozen_backbone'),
    _case('EfficientNetV2B2', 224, 64, 'adamw', precision='float32', last_n=40, channels=1, mode='last_n'),
    _case('NASNetMobile', 192, 12, 'lion', precision='float32', classes=10),
    _case('DenseNet201', 192, 2, 'adafactor', precision='float32', mode='frozen_backbone'),
    # A twenty-second (stop 19, `sample_holdout.py --seed 24 --count 14 --max-peak-gib 1.0 --precision
    # float32`), predicted (in the commit message) before measuring, after the elementwise chains'
    # new buffers and the keyed feature maps.
    _case('InceptionV3', 299, 8, 'adam', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2B0', 192, 12, 'adamw', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetV2M', 96, 8, 'adam', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2B0', 192, 16, 'lion', precision='float32'),
    _case('InceptionResNetV2', (96, 192), 16, 'sgd', precision='float32', momentum=True, channels=1, mode='frozen_backbone'),
    _case('InceptionV3', 224, 2, 'lion', precision='float32', classes=10),
    _case('MobileNetV3Small', 160, 6, 'adamw', precision='float32', amsgrad=True, classes=10),
    _case('EfficientNetB0', 192, 6, 'nadam', precision='float32', classes=10),
    _case('EfficientNetB0', (96, 224), 24, 'rmsprop', precision='float32'),
    _case('ConvNeXtBase', 96, 8, 'lamb', precision='float32', mode='frozen_backbone'),
    _case('NASNetMobile', 192, 6, 'adadelta', precision='float32', mode='frozen_backbone'),
    _case('ResNet101V2', 160, 48, 'adafactor', precision='float32', mode='frozen_backbone'),
    _case('MobileNetV2', 96, 2, 'lion', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('VGG16', 96, 24, 'nadam', precision='float32', last_n=40, mode='last_n'),
    # A twenty-third (stop 19, `sample_holdout.py --seed 25 --count 14 --max-peak-gib 1.0 --precision
    # mixed_bfloat16`), predicted (in the commit message) before measuring, with the engine as stop 19 left it.
    _case('InceptionV3', 299, 8, 'adadelta', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('EfficientNetB3', 96, 24, 'adam', precision='mixed_bfloat16'),
    _case('EfficientNetV2B2', (96, 160), 2, 'ftrl', precision='mixed_bfloat16'),
    _case('EfficientNetB0', (64, 224), 12, 'adagrad', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('Xception', 128, 1, 'adagrad', precision='mixed_bfloat16'),
    _case('ResNet152', 96, 48, 'adadelta', precision='mixed_bfloat16', last_n=30, channels=1, mode='last_n'),
    _case('EfficientNetB1', 192, 64, 'adamax', precision='mixed_bfloat16', last_n=60, mode='last_n'),
    _case('EfficientNetB2', 64, 24, 'adamw', precision='mixed_bfloat16'),
    _case('VGG19', 128, 8, 'adamw', precision='mixed_bfloat16', amsgrad=True, classes=10, mode='frozen_backbone'),
    _case('DenseNet169', 64, 2, 'nadam', precision='mixed_bfloat16', use_ema=True, mode='frozen_backbone'),
    _case('DenseNet121', 96, 64, 'lamb', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('EfficientNetB2', 160, 4, 'lion', precision='mixed_bfloat16', last_n=60, mode='last_n'),
    _case('ResNet101V2', 96, 4, 'ftrl', precision='mixed_bfloat16'),
    _case('EfficientNetB2', 160, 24, 'adamw', precision='mixed_bfloat16', mode='frozen_backbone'),
    # A twenty-fourth (stop 20, `sample_holdout.py --seed 26 --count 14 --max-peak-gib 1.0 --precision
    # float32`), predicted (in the commit message) before measuring, with the engine of e0ffc60.
    _case('EfficientNetB4', 160, 32, 'lion', precision='float32', use_ema=True, channels=1, mode='frozen_backbone'),
    _case('EfficientNetB2', 224, 6, 'adam', precision='float32', classes=10, mode='frozen_backbone'),
    _case('EfficientNetB1', 96, 8, 'lamb', precision='float32', last_n=20, classes=10, mode='last_n'),
    _case('ResNet152V2', (192, 64), 6, 'rmsprop', precision='float32', momentum=True, mode='frozen_backbone'),
    _case('ConvNeXtSmall', 64, 16, 'adamw', precision='float32', last_n=30, mode='last_n'),
    _case('NASNetLarge', 96, 16, 'rmsprop', precision='float32', momentum=True, last_n=60, mode='last_n'),
    _case('NASNetMobile', 64, 2, 'nadam', precision='float32', use_ema=True, accum=4),
    _case('MobileNet', 192, 6, 'sgd', precision='float32', momentum=True, channels=1, classes=10),
    _case('EfficientNetB5', 160, 4, 'adagrad', precision='float32', classes=10),
    _case('ResNet152', (64, 160), 32, 'lion', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2B2', 256, 1, 'lamb', precision='float32', classes=10, mode='frozen_backbone'),
    _case('EfficientNetV2L', 160, 1, 'adafactor', precision='float32', channels=1, classes=10, mode='frozen_backbone'),
    _case('VGG19', 192, 12, 'adafactor', precision='float32', channels=1, mode='frozen_backbone'),
    _case('EfficientNetB2', 64, 2, 'nadam', precision='float32', mode='frozen_backbone'),
    # A twenty-fifth (stop 20, `sample_holdout.py --seed 27 --count 14 --max-peak-gib 1.0 --precision
    # mixed_bfloat16`), predicted (in the commit message) before measuring, with the engine of e0ffc60.
    _case('NASNetMobile', 224, 4, 'adamax', precision='mixed_bfloat16'),
    _case('EfficientNetB7', 160, 16, 'adafactor', precision='mixed_bfloat16', channels=1, mode='frozen_backbone'),
    _case('ConvNeXtTiny', 224, 48, 'adamw', precision='mixed_bfloat16', amsgrad=True, mode='frozen_backbone'),
    _case('EfficientNetB6', (331, 256), 4, 'adamax', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('NASNetLarge', 128, 48, 'adadelta', precision='mixed_bfloat16', last_n=40, mode='last_n'),
    _case('DenseNet201', 64, 24, 'adamw', precision='mixed_bfloat16', channels=1, mode='frozen_backbone'),
    _case('EfficientNetV2S', 64, 12, 'adafactor', precision='mixed_bfloat16'),
    _case('EfficientNetV2B1', 64, 4, 'adagrad', precision='mixed_bfloat16'),
    _case('EfficientNetV2M', 380, 1, 'adam', precision='mixed_bfloat16', amsgrad=True, mode='frozen_backbone'),
    _case('EfficientNetB0', 64, 24, 'adafactor', precision='mixed_bfloat16', classes=10),
    _case('NASNetMobile', (128, 192), 1, 'adafactor', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('VGG19', 160, 12, 'lamb', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('EfficientNetB2', 256, 1, 'adamax', precision='mixed_bfloat16', classes=10),
    _case('MobileNetV3Small', 96, 16, 'adafactor', precision='mixed_bfloat16', mode='frozen_backbone'),
    # A twenty-sixth (stop 20, `sample_holdout.py --seed 28 --count 14 --max-peak-gib 1.0 --precision
    # float32`), predicted (in the commit message) before measuring, with the engine of e0ffc60 and, for
    # the steps with a frozen part, with max(walk, warmed, drawn) (benchmarks/warmup_sim.py --frozen-policies).
    _case('DenseNet201', (224, 192), 4, 'sgd', precision='float32', momentum=True, classes=10),
    _case('ResNet152', 224, 8, 'adamax', precision='float32', last_n=20, mode='last_n'),
    _case('EfficientNetV2B0', 64, 24, 'adamax', precision='float32', channels=1),
    _case('ResNet101', 96, 6, 'lion', precision='float32', mode='frozen_backbone'),
    _case('ResNet101V2', 64, 2, 'lamb', precision='float32'),
    _case('NASNetMobile', 224, 12, 'sgd', precision='float32', mode='frozen_backbone'),
    _case('ResNet50V2', 192, 16, 'adamw', precision='float32', mode='frozen_backbone'),
    _case('NASNetLarge', 128, 6, 'adafactor', precision='float32', last_n=30, mode='last_n'),
    _case('ResNet50V2', (96, 192), 24, 'adafactor', precision='float32'),
    _case('MobileNet', 224, 1, 'sgd', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2L', 160, 24, 'nadam', precision='float32', last_n=60, mode='last_n'),
    _case('InceptionV3', 299, 4, 'adamax', precision='float32'),
    _case('EfficientNetV2B1', 128, 24, 'adam', precision='float32', use_ema=True),
    _case('InceptionV3', 299, 8, 'ftrl', precision='float32', mode='frozen_backbone'),
    # A twenty-seventh (stop 21, `sample_holdout.py --seed 29 --count 14 --max-peak-gib 1.0 --precision
    # float32 --frozen`: only steps with a frozen part, to settle the frozen-step policy), predicted (in the
    # commit message) before measuring with the engine of 36449b7 and with max(walk, warmed, drawn).
    _case('EfficientNetB6', (224, 299), 16, 'adamw', precision='float32', classes=10, mode='frozen_backbone'),
    _case('NASNetMobile', (192, 128), 2, 'adamax', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetB1', 128, 1, 'sgd', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetV2B0', (160, 96), 6, 'adafactor', precision='float32', mode='frozen_backbone'),
    _case('MobileNetV2', 64, 1, 'ftrl', precision='float32', classes=10, mode='frozen_backbone'),
    _case('ResNet101V2', 224, 24, 'adagrad', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetV2B3', (64, 192), 8, 'adam', precision='float32', amsgrad=True, mode='frozen_backbone'),
    _case('EfficientNetB5', (128, 224), 16, 'rmsprop', precision='float32', momentum=True, mode='frozen_backbone'),
    _case('InceptionResNetV2', 96, 4, 'adamw', precision='float32', amsgrad=True, mode='frozen_backbone'),
    _case('ResNet101V2', 64, 16, 'adamw', precision='float32', mode='frozen_backbone'),
    _case('ResNet152V2', 192, 32, 'adadelta', precision='float32', last_n=30, mode='last_n'),
    _case('DenseNet169', 160, 48, 'adadelta', precision='float32', mode='frozen_backbone'),
    _case('MobileNetV3Large', 96, 8, 'nadam', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetB0', 160, 8, 'adam', precision='float32', mode='frozen_backbone'),
    # A twenty-eighth (stop 21, `sample_holdout.py --seed 30 --count 14 --max-peak-gib 1.0 --precision
    # float32`), predicted (in the commit message) before measuring with the engine of 994e1d8.
    _case('EfficientNetV2S', 331, 2, 'ftrl', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetV2B1', 224, 2, 'adafactor', precision='float32', last_n=30, mode='last_n'),
    _case('EfficientNetB0', 96, 24, 'adafactor', precision='float32'),
    _case('EfficientNetV2B0', 192, 6, 'sgd', precision='float32'),
    _case('NASNetMobile', 128, 24, 'sgd', precision='float32', last_n=40, mode='last_n'),
    _case('InceptionResNetV2', 160, 1, 'sgd', precision='float32', momentum=True, last_n=20, mode='last_n'),
    _case('VGG16', 192, 1, 'ftrl', precision='float32', channels=1, mode='frozen_backbone'),
    _case('EfficientNetB1', 192, 1, 'adamw', precision='float32', amsgrad=True),
    _case('EfficientNetB4', 256, 8, 'lamb', precision='float32', use_ema=True, last_n=40, mode='last_n'),
    _case('Xception', 96, 48, 'adamw', precision='float32', amsgrad=True, mode='frozen_backbone'),
    _case('EfficientNetB3', 96, 4, 'lamb', precision='float32', classes=10),
    _case('ResNet152', (128, 224), 12, 'rmsprop', precision='float32', classes=10, mode='frozen_backbone'),
    _case('EfficientNetB1', 192, 4, 'sgd', precision='float32'),
    _case('EfficientNetB4', 128, 2, 'adam', precision='float32', amsgrad=True, accum=4),
    # A twenty-ninth (stop 22, `sample_holdout.py --seed 31 --count 14 --max-peak-gib 1.0 --precision
    # mixed_bfloat16`), predicted (in the commit message) before measuring with the engine of 2a63f18.
    _case('ConvNeXtTiny', 96, 16, 'sgd', precision='mixed_bfloat16', last_n=10, channels=1, mode='last_n'),
    _case('EfficientNetV2M', 160, 1, 'ftrl', precision='mixed_bfloat16', last_n=20, mode='last_n'),
    _case('ConvNeXtTiny', 96, 6, 'adam', precision='mixed_bfloat16', amsgrad=True),
    _case('DenseNet121', 96, 6, 'nadam', precision='mixed_bfloat16', last_n=40, mode='last_n'),
    _case('DenseNet201', 160, 6, 'adamw', precision='mixed_bfloat16'),
    _case('VGG16', 64, 1, 'lamb', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('EfficientNetV2B0', 160, 4, 'lamb', precision='mixed_bfloat16'),
    _case('DenseNet201', 192, 4, 'adadelta', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('ResNet50', 160, 48, 'lion', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    _case('ResNet152V2', 192, 8, 'adamax', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('EfficientNetV2B0', 192, 12, 'sgd', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('EfficientNetV2S', 192, 64, 'adamw', precision='mixed_bfloat16', amsgrad=True, last_n=40, mode='last_n'),
    _case('EfficientNetV2B1', 224, 8, 'adadelta', precision='mixed_bfloat16', use_ema=True),
    _case('EfficientNetV2B2', 128, 64, 'adam', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    # A thirtieth, of larger steps (stop 22, `sample_holdout.py --seed 32 --count 8 --min-peak-gib 1.5
    # --max-peak-gib 6 --max-activations-gib 5 --precision float32`), predicted (in the commit message)
    # before measuring with the engine of 2a63f18.
    _case('EfficientNetV2M', (96, 331), 24, 'adafactor', precision='float32', accum=2),
    _case('EfficientNetB0', 224, 32, 'lion', precision='float32'),
    _case('DenseNet201', 160, 12, 'rmsprop', precision='float32', centered=True, accum=4, channels=1, classes=10),
    _case('EfficientNetB5', 299, 6, 'adafactor', precision='float32', use_ema=True),
    _case('ConvNeXtXLarge', 128, 24, 'adamax', precision='float32', classes=10, mode='frozen_backbone'),
    _case('EfficientNetB6', 128, 16, 'rmsprop', precision='float32', centered=True, classes=10),
    _case('ConvNeXtBase', 64, 6, 'adadelta', precision='float32', channels=1, classes=10),
    _case('EfficientNetV2B3', (256, 96), 32, 'adafactor', precision='float32', classes=10),
    # A thirty-first, NASNet frozen steps only (stop 22, `sample_holdout.py --seed 33 --count 12
    # --max-peak-gib 1.0 --precision float32 --frozen --models NASNetMobile,NASNetLarge`), predicted
    # (in the commit message) before measuring with the engine of 2a63f18 and with a candidate
    # executor order (the consumers of a layer that common-subexpression elimination merges run first).
    _case('NASNetLarge', 160, 64, 'adamax', precision='float32', classes=10, mode='frozen_backbone'),
    _case('NASNetMobile', 224, 24, 'lamb', precision='float32', mode='frozen_backbone'),
    _case('NASNetLarge', 96, 32, 'adafactor', precision='float32', classes=10, mode='frozen_backbone'),
    _case('NASNetMobile', 192, 32, 'adagrad', precision='float32', mode='frozen_backbone'),
    _case('NASNetMobile', 224, 48, 'sgd', precision='float32', channels=1, classes=10, mode='frozen_backbone'),
    _case('NASNetMobile', 160, 64, 'adamw', precision='float32', classes=10, mode='frozen_backbone'),
    _case('NASNetMobile', 64, 2, 'nadam', precision='float32', mode='frozen_backbone'),
    _case('NASNetMobile', 128, 12, 'rmsprop', precision='float32', centered=True, use_ema=True, mode='frozen_backbone'),
    _case('NASNetLarge', 224, 2, 'lamb', precision='float32', classes=10, mode='frozen_backbone'),
    _case('NASNetLarge', 128, 48, 'adamw', precision='float32', mode='frozen_backbone'),
    _case('NASNetMobile', 96, 64, 'ftrl', precision='float32', mode='frozen_backbone'),
    _case('NASNetLarge', (64, 128), 4, 'ftrl', precision='float32', last_n=20, classes=10, mode='last_n'),
    # A thirty-second (stop 22, `sample_holdout.py --seed 34 --count 14 --max-peak-gib 1.0 --precision
    # float32`), predicted (in the commit message) before measuring with the engine of 998ae2a.
    _case('EfficientNetB1', 64, 1, 'nadam', precision='float32', use_ema=True, accum=2),
    _case('InceptionV3', 128, 16, 'rmsprop', precision='float32', momentum=True),
    _case('EfficientNetB7', 160, 8, 'adafactor', precision='float32', classes=10, mode='frozen_backbone'),
    _case('EfficientNetB4', 128, 8, 'adamw', precision='float32', classes=10),
    _case('EfficientNetB0', 96, 16, 'adamax', precision='float32', use_ema=True),
    _case('EfficientNetV2B3', 224, 4, 'nadam', precision='float32'),
    _case('MobileNetV2', 128, 8, 'rmsprop', precision='float32', momentum=True, classes=10),
    _case('DenseNet121', 224, 64, 'adagrad', precision='float32', classes=10, mode='frozen_backbone'),
    _case('VGG19', 192, 4, 'lamb', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetV2B3', 299, 2, 'lion', precision='float32'),
    _case('EfficientNetV2B1', 64, 12, 'lamb', precision='float32', mode='frozen_backbone'),
    _case('DenseNet169', 128, 16, 'rmsprop', precision='float32', momentum=True, mode='frozen_backbone'),
    _case('ResNet101V2', (160, 64), 16, 'sgd', precision='float32', momentum=True, mode='frozen_backbone'),
    _case('VGG19', 64, 4, 'lamb', precision='float32', mode='frozen_backbone'),
    # A thirty-third, NASNet steps with a frozen part under mixed_bfloat16 (stop 22, `sample_holdout.py
    # --seed 35 --count 8 --max-peak-gib 1.0 --precision mixed_bfloat16 --frozen --models
    # NASNetMobile,NASNetLarge`), predicted (in the commit message) before measuring with the engine of
    # 998ae2a (CSE order) and of 29a747e (before it).
    _case('NASNetMobile', 96, 8, 'adagrad', precision='mixed_bfloat16', last_n=10, mode='last_n'),
    _case('NASNetMobile', 224, 1, 'adafactor', precision='mixed_bfloat16', last_n=10, mode='last_n'),
    _case('NASNetMobile', 192, 48, 'adafactor', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    _case('NASNetLarge', 160, 1, 'adagrad', precision='mixed_bfloat16', use_ema=True, mode='frozen_backbone'),
    _case('NASNetLarge', 224, 12, 'rmsprop', precision='mixed_bfloat16', mode='frozen_backbone'),
    _case('NASNetLarge', (299, 192), 4, 'adafactor', precision='mixed_bfloat16', last_n=30, mode='last_n'),
    _case('NASNetLarge', 299, 24, 'lion', precision='mixed_bfloat16', use_ema=True, last_n=20, mode='last_n'),
    _case('NASNetLarge', 128, 32, 'lamb', precision='mixed_bfloat16', classes=10, mode='frozen_backbone'),
    # A thirty-fourth, steps with EMA (stop 23, `sample_holdout.py --seed 36 --count 8 --max-peak-gib
    # 1.0 --precision float32 --ema` and `--seed 37 --count 6 ... --precision mixed_bfloat16 --ema`),
    # predicted (in the commit message) before measuring with the engine that counts EMA's temporary
    # beside the update (this commit) and with the one before it (7c9b8f8).
    _case('ResNet50', 128, 16, 'nadam', precision='float32', use_ema=True),
    _case('EfficientNetB2', 64, 1, 'sgd', precision='float32', use_ema=True),
    _case('VGG19', 160, 24, 'lamb', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetV2B0', (192, 224), 6, 'lion', precision='float32', channels=1, use_ema=True),
    _case('ResNet50V2', 96, 4, 'sgd', precision='float32', momentum=True, last_n=10, use_ema=True, mode='last_n'),
    _case('ResNet152V2', 192, 4, 'adamax', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetB0', 96, 32, 'adafactor', precision='float32', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetB0', 128, 24, 'adafactor', precision='float32', use_ema=True),
    _case('VGG19', 64, 64, 'rmsprop', precision='mixed_bfloat16', use_ema=True, mode='frozen_backbone'),
    _case('NASNetLarge', 192, 8, 'sgd', precision='mixed_bfloat16', channels=1, classes=10, use_ema=True, mode='frozen_backbone'),
    _case('InceptionResNetV2', 256, 48, 'nadam', precision='mixed_bfloat16', use_ema=True, mode='frozen_backbone'),
    _case('EfficientNetB1', 96, 12, 'rmsprop', precision='mixed_bfloat16', momentum=True, classes=10, use_ema=True),
    _case('EfficientNetB3', 128, 2, 'rmsprop', precision='mixed_bfloat16', centered=True, last_n=20, use_ema=True, mode='last_n'),
    _case('EfficientNetV2B1', 160, 24, 'adadelta', precision='mixed_bfloat16', use_ema=True),
    # A thirty-fifth, float32 (stop 23, `sample_holdout.py --seed 38 --count 12 --max-peak-gib 1.0
    # --precision float32`), drawn and predicted (in the commit message) after this stop's engine change.
    _case('MobileNetV2', 160, 48, 'adafactor', precision='float32', use_ema=True, channels=1, mode='frozen_backbone'),
    _case('EfficientNetV2S', 224, 32, 'adamw', precision='float32', last_n=40, mode='last_n'),
    _case('ResNet101', 96, 4, 'adam', precision='float32', amsgrad=True),
    _case('NASNetMobile', 64, 16, 'sgd', precision='float32', momentum=True),
    _case('ResNet101', 128, 32, 'adagrad', precision='float32', classes=10, mode='frozen_backbone'),
    _case('ResNet50V2', 96, 1, 'adadelta', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetB4', 64, 8, 'adamax', precision='float32'),
    _case('EfficientNetV2B0', 96, 2, 'adadelta', precision='float32', channels=1, mode='frozen_backbone'),
    _case('ResNet152V2', 224, 64, 'ftrl', precision='float32', mode='frozen_backbone'),
    _case('EfficientNetB7', 160, 32, 'adafactor', precision='float32', last_n=30, channels=1, mode='last_n'),
    _case('MobileNet', 160, 2, 'rmsprop', precision='float32', momentum=True),
    _case('MobileNetV3Small', 224, 24, 'lamb', precision='float32'),
    # A thirty-sixth, mixed_bfloat16 steps that train (stop 24, `sample_holdout.py --seed 39 --count 12
    # --max-peak-gib 1.0 --precision mixed_bfloat16 --trained`), predicted (in the commit message) before measuring.
    _case('EfficientNetB5', 192, 1, 'adam', precision='mixed_bfloat16', amsgrad=True),
    _case('EfficientNetV2S', (299, 256), 2, 'adafactor', precision='mixed_bfloat16', last_n=20, mode='last_n'),
    _case('ResNet50V2', 64, 6, 'adam', precision='mixed_bfloat16'),
    _case('DenseNet121', 192, 2, 'adadelta', precision='mixed_bfloat16', accum=4),
    _case('MobileNetV3Small', (192, 224), 8, 'adafactor', precision='mixed_bfloat16'),
    _case('ResNet101V2', (160, 64), 16, 'adafactor', precision='mixed_bfloat16', classes=10),
    _case('MobileNetV3Large', 160, 64, 'ftrl', precision='mixed_bfloat16', use_ema=True, last_n=40, classes=10, mode='last_n'),
    _case('EfficientNetV2S', 192, 24, 'lion', precision='mixed_bfloat16', last_n=60, mode='last_n'),
    _case('EfficientNetV2B2', 256, 1, 'rmsprop', precision='mixed_bfloat16', centered=True, use_ema=True, accum=2),
    _case('EfficientNetV2M', 380, 24, 'adamax', precision='mixed_bfloat16', last_n=10, mode='last_n'),
    _case('EfficientNetB6', 128, 1, 'adadelta', precision='mixed_bfloat16'),
    _case('DenseNet169', 160, 12, 'adamax', precision='mixed_bfloat16', last_n=20, mode='last_n'),
    # A thirty-seventh, mixed_float16 (stop 24, `sample_holdout.py --seed 40 --count 10 --max-peak-gib 1.0
    # --precision mixed_float16`), predicted (in the commit message, with this CPU's float16 kernels) before measuring.
    _case('ConvNeXtBase', 64, 64, 'adamax', precision='mixed_float16', mode='frozen_backbone'),
    # ran past the protocol's 600 s a run here (float16 kernels on the CPU), not measured:
    # _case('EfficientNetV2M', 380, 48, 'adamax', precision='mixed_float16', last_n=10, mode='last_n'),
    # ran past the protocol's 600 s a run here (float16 kernels on the CPU), not measured:
    # _case('InceptionV3', 128, 6, 'sgd', precision='mixed_float16', accum=4),
    _case('MobileNetV3Small', 224, 1, 'adagrad', precision='mixed_float16'),
    _case('MobileNet', 64, 1, 'rmsprop', precision='mixed_float16', centered=True),
    _case('ResNet152V2', 192, 48, 'nadam', precision='mixed_float16', channels=1, mode='frozen_backbone'),
    _case('ConvNeXtSmall', 192, 2, 'sgd', precision='mixed_float16', use_ema=True),
    _case('EfficientNetB2', 256, 48, 'nadam', precision='mixed_float16', use_ema=True, mode='frozen_backbone'),
    _case('MobileNetV2', (160, 224), 24, 'adagrad', precision='mixed_float16'),
    # ran past the protocol's 600 s a run here (float16 kernels on the CPU), not measured:
    # _case('EfficientNetB6', 299, 12, 'ftrl', precision='mixed_float16', last_n=40, channels=1, mode='last_n'),
)


def _file_case(name, batch, optimizer, precision="float32", mode="all", last_n=0, accum=1, **options):
    """One own-model case: a file in ``MODEL_FILES_DIR``, trained as saved."""
    config = TrainingConfig(batch_size=batch, optimizer=optimizer, precision=precision, train_mode=mode,
                            last_n_layers=last_n, gradient_accumulation_steps=accum,
                            optimizer_options=OptimizerOptions(**options))
    return ModelFile(f"{MODEL_FILES_DIR}/{name}.keras"), config


# Own models (stop 15): architectures that are not Keras applications, in three slices, each
# chosen and predicted before any of it was measured (the predictions are in the messages of
# the commits that added them). The first five carry the layers people combine themselves
# (UpSampling2D, Conv2DTranspose, PReLU, Conv1D, GELU with LayerNormalization, a large
# Flatten -> Dense head on a 50x180x1 input).
CUSTOM_CASES: tuple[tuple[ModelFile, TrainingConfig], ...] = (
    _file_case("plain_cnn", 32, "adam"),
    _file_case("plain_cnn", 128, "sgd", momentum=True),
    _file_case("plain_cnn", 16, "rmsprop", precision="mixed_float16"),
    _file_case("unet_small", 8, "adam"),
    _file_case("unet_small", 16, "sgd", precision="mixed_bfloat16"),
    _file_case("unet_small", 4, "adamw", precision="mixed_float16"),
    _file_case("unet_small", 8, "adam", accum=2),
    _file_case("residual_sep", 32, "nadam"),
    _file_case("residual_sep", 64, "adagrad", precision="mixed_bfloat16"),
    _file_case("residual_sep", 64, "lion", mode="last_n", last_n=10),
    _file_case("convmixer", 32, "adam"),
    _file_case("convmixer", 8, "adafactor", precision="mixed_float16"),
    _file_case("convmixer", 64, "sgd"),
    _file_case("conv1d_audio", 64, "adam"),
    _file_case("conv1d_audio", 16, "ftrl", precision="mixed_bfloat16"),
    _file_case("conv1d_audio", 128, "adamax", mode="last_n", last_n=6),
    # A second own-model slice (stop 15), new architectures, predicted before measuring.
    _file_case("vgg_bn", 16, "adam"),
    _file_case("vgg_bn", 48, "sgd", precision="mixed_float16", momentum=True),
    _file_case("vgg_bn", 8, "nadam", mode="last_n", last_n=8),
    _file_case("inception_mini", 32, "rmsprop"),
    _file_case("inception_mini", 64, "adamw", precision="mixed_bfloat16"),
    _file_case("mlp", 256, "adam"),
    _file_case("mlp", 64, "sgd"),
    _file_case("mlp", 128, "lamb", precision="mixed_float16"),
    # A third (stop 15): the small models of tutorials, predicted before measuring.
    _file_case("mnist_cnn", 128, "adam"),
    _file_case("mnist_cnn", 512, "rmsprop"),
    _file_case("resnet20", 128, "sgd", momentum=True),
    _file_case("resnet20", 256, "adam", precision="mixed_bfloat16"),
    _file_case("autoencoder", 32, "adam"),
    _file_case("autoencoder", 64, "adamw", precision="mixed_float16"),
    # A fourth (stop 16): Keras examples with attention, embeddings and augmentation layers,
    # their rules (calc.rules, calc.keras.profile._attention_steps) written before measuring.
    _file_case("vit_tiny", 64, "adam"),
    _file_case("vit_tiny", 32, "adamw", precision="mixed_float16"),
    _file_case("vit_tiny", 96, "sgd", precision="mixed_bfloat16", momentum=True),
    _file_case("text_transformer", 128, "adam"),
    _file_case("text_transformer", 256, "rmsprop", precision="mixed_float16"),
    _file_case("text_cnn", 64, "adam"),
    _file_case("text_cnn", 256, "nadam", precision="mixed_bfloat16"),
    _file_case("augmented_xception", 16, "adam"),
    _file_case("augmented_xception", 32, "sgd", precision="mixed_float16", momentum=True),
    _file_case("augmented_xception", 16, "adamw", mode="last_n", last_n=10),
    # A fifth (stop 16): a transfer-learning file, a GAN discriminator, a tabular network and
    # a segmentation network, predicted with and without a floor by the allocator simulation.
    _file_case("transfer_mobilenet", 32, "adam"),
    _file_case("transfer_mobilenet", 64, "sgd", precision="mixed_float16", momentum=True),
    _file_case("transfer_mobilenet", 32, "adam", mode="frozen_backbone"),
    _file_case("transfer_mobilenet", 16, "rmsprop", precision="mixed_bfloat16", mode="last_n", last_n=20),
    _file_case("dcgan_discriminator", 64, "adam"),
    _file_case("dcgan_discriminator", 128, "rmsprop", precision="mixed_bfloat16"),
    _file_case("tabular_bn", 1024, "adam"),
    _file_case("tabular_bn", 4096, "sgd"),
    _file_case("segmentation_xception", 16, "adam"),
    _file_case("segmentation_xception", 8, "adamw", precision="mixed_float16"),
    # A sixth (stop 18): recurrent networks (LSTM, GRU, Bidirectional), predicted with the
    # unknown-layer rule before they were measured (the predictions are in the commit message).
    _file_case("imdb_bilstm", 32, "adam"),
    _file_case("imdb_bilstm", 128, "rmsprop"),
    _file_case("imdb_bilstm", 64, "nadam", precision="mixed_bfloat16"),
    _file_case("text_gru", 64, "adam"),
    _file_case("text_gru", 32, "sgd", momentum=True),
    _file_case("lstm_forecast", 256, "adam"),
    _file_case("lstm_forecast", 64, "rmsprop"),
    # A seventh (stop 21): 1-D networks for the rules of stop 21 (a 1-D pool's input gradient
    # above a bias kept to the step's end; UpSampling1D, Conv1DTranspose, ZeroPadding1D,
    # Cropping1D, SeparableConv1D, DepthwiseConv1D, SpatialDropout1D, GaussianNoise),
    # predicted before they were measured (the predictions are in the commit message).
    _file_case("ecg_cnn", 8, "adam"),
    _file_case("ecg_cnn", 16, "sgd", precision="mixed_bfloat16", momentum=True),
    _file_case("ecg_cnn", 32, "rmsprop"),
    _file_case("unet1d", 16, "adam"),
    _file_case("unet1d", 32, "adamw", precision="mixed_bfloat16"),
    _file_case("kws_sep1d", 8, "adam"),
    _file_case("kws_sep1d", 16, "sgd"),
    # An eighth (stop 21): sequence networks for the held-gradient rules (a gradient into a
    # biased Conv1D or Dense kept to the step's end; a Concatenate's until its earliest input),
    # predicted before they were measured (the predictions are in the commit message).
    _file_case("tcn", 16, "adam"),
    _file_case("tcn", 32, "sgd", precision="mixed_bfloat16"),
    _file_case("unet1d_bn", 16, "adam"),
    _file_case("unet1d_bn", 8, "rmsprop"),
    _file_case("token_mlp", 64, "adamw"),
    _file_case("token_mlp", 128, "sgd", precision="mixed_bfloat16", momentum=True),
    # A ninth (stop 21): dilated and causal Conv1Ds for the rule of 1aaeb1a, predicted before
    # they were measured (the predictions are in the commit message).
    _file_case("wavenet_lite", 16, "adam"),
    _file_case("wavenet_lite", 32, "rmsprop", precision="mixed_bfloat16"),
    _file_case("dilated_seg", 16, "adamw"),
    _file_case("dilated_seg", 32, "sgd", momentum=True),
)


def case_id(spec: ModelSpec | ModelFile, config: TrainingConfig) -> str:
    opts = config.optimizer_options
    flags = [f for f in ("momentum", "amsgrad", "centered", "use_ema") if getattr(opts, f)]
    parts = [spec.key, f"b{config.batch_size}", config.optimizer.value, *flags, config.precision.value]
    if config.gradient_accumulation_steps > 1:
        parts.append(f"accumulate_{config.gradient_accumulation_steps}")
    if config.train_mode.value == "last_n":
        parts.append(f"last_{config.last_n_layers}_layers")
    elif config.train_mode.value != "all":
        parts.append(config.train_mode.value)
    return " ".join(parts)


@dataclass(frozen=True)
class ValidationRow:
    case: str
    spec: ModelSpec
    config: TrainingConfig
    measured_bytes: int
    spread: float
    predicted_bytes: int
    runs_bytes: tuple[int, ...] = ()  # every run's peak (the median is ``measured_bytes``)
    caveats: tuple[str, ...] = ()  # the kinds calc.estimate.spread_caveats names for the step

    @property
    def relative_error(self) -> float:
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes

    @property
    def error_from_nearest_run(self) -> float:
        """How far the prediction lies outside the measured runs' range, over the median (0 inside)."""
        runs = self.runs_bytes or (self.measured_bytes,)
        low, high = min(runs), max(runs)
        if self.predicted_bytes > high:
            return (self.predicted_bytes - high) / self.measured_bytes
        if self.predicted_bytes < low:
            return (self.predicted_bytes - low) / self.measured_bytes
        return 0.0

    @property
    def margin_for_every_run(self) -> float:
        """The safety margin (share of the memory kept free) under which every run fits.

        A run ``h`` above the estimate fits when the estimate uses at most ``1 - m`` of the
        memory, ``m = h / (1 + h)``; 0 when no run is above the estimate.
        """
        return margin_for_runs(self.runs_bytes or (self.measured_bytes,), self.predicted_bytes)


def margin_for_runs(runs_bytes, predicted_bytes: int) -> float:
    """``ValidationRow.margin_for_every_run`` for one case's runs and its prediction."""
    above = max(max(runs_bytes) / predicted_bytes - 1, 0.0)
    return above / (1 + above)


@dataclass(frozen=True)
class Reproducibility:
    """How far each measured run lies from a reference: the median of its case's other runs
    (TensorFlow against itself), or the case's prediction (the estimate against single runs).
    Cases with at least three runs."""

    cases: int
    runs: int
    runs_beyond: int  # runs more than ``threshold`` from their reference
    cases_with_run_beyond: int
    median_deviation: float  # the median, over runs, of |run / reference - 1|
    threshold: float


def reproducibility(runs_per_case, threshold: float = 0.10, predictions=None) -> Reproducibility:
    """``Reproducibility`` of measured runs, one sequence of peaks (bytes) per case.

    Without ``predictions`` each run is set against the median of its case's other runs: the
    floor under any estimate's error on a step measured afresh, since a prediction equal to that
    median still misses a run that lies ``threshold`` from it. With ``predictions`` (bytes, one
    per case) each run is set against its case's prediction instead, on the same footing.
    """
    deviations, cases, flagged = [], 0, 0
    for runs, predicted in zip(map(list, runs_per_case), repeat(None) if predictions is None else predictions):
        if len(runs) < 3:
            continue
        cases += 1
        if predicted is None:
            own = [abs(run / statistics.median(runs[:i] + runs[i + 1:]) - 1) for i, run in enumerate(runs)]
        else:
            own = [abs(predicted / run - 1) for run in runs]
        deviations += own
        flagged += any(d > threshold for d in own)
    if not deviations:
        raise ValueError("No case with three or more runs.")
    return Reproducibility(cases, len(deviations), sum(d > threshold for d in deviations), flagged,
                           statistics.median(deviations), threshold)


def reproducibility_json(rows: list[ValidationRow], against_prediction: bool = False) -> dict[str, Any] | None:
    """``reproducibility`` of the rows' runs as JSON (against each row's prediction when
    ``against_prediction``); None when no case has three runs (a GPU slice)."""
    predictions = [r.predicted_bytes for r in rows] if against_prediction else None
    try:
        return asdict(reproducibility((r.runs_bytes for r in rows), predictions=predictions))
    except ValueError:
        return None


def load_measurements(path: Path = CPU_DATA) -> dict[str, Any]:
    """Reads a validation data file: ``{"environment": {...}, "cases": [...]}``."""
    if not path.exists():
        return {"environment": {}, "cases": []}
    return json.loads(path.read_text())


def save_measurement(path: Path, spec: ModelSpec, config: TrainingConfig, measurement: Any) -> None:
    data = load_measurements(path)
    data["environment"] = {
        "device": measurement.device,
        "tensorflow": measurement.tensorflow,
        "keras": measurement.keras,
        "threads": measurement.threads,
        "protocol": "build, compile, train_on_batch until a step has applied its update (one step, except under mixed_float16 loss scaling), reset_memory_stats, one train_on_batch that applies its update, read peak; each run a fresh process",
    }
    cid = case_id(spec, config)
    data["cases"] = [c for c in data["cases"] if c["case"] != cid]
    data["cases"].append(
        {
            "case": cid,
            "spec": spec_to_dict(spec),
            "config": config_to_dict(config),
            "peaks_bytes": list(measurement.peaks_bytes),
            "resident_before_step_bytes": list(measurement.resident_bytes),
            "peak_bytes": measurement.peak_bytes,
            "spread": round(measurement.spread, 4),
            "seconds": measurement.seconds,
            "kernels": measurement.kernels,
        }
    )
    path.write_text(json.dumps(data, indent=1) + "\n")


def measured_device(data: dict[str, Any], case: dict[str, Any] | None = None) -> Device:
    """The kernels a data file's step ran with: the case's ``kernels`` (recorded since stop 17,
    when CPUs with AVX512-FP16 appeared among the machines), else the environment's ``device``
    (``CPU:0``: the CPUs every earlier case ran on, without it; ``GPU:0 (...)``)."""
    if case is not None and case.get("kernels") in {d.value for d in Device}:
        return Device(case["kernels"])
    return Device.GPU if str(data.get("environment", {}).get("device", "")).startswith("GPU") else Device.CPU


def validate(path: Path = CPU_DATA, profile_for=None) -> list[ValidationRow]:
    """Estimates every measured case. ``profile_for(spec)`` returns a profile (cached)."""
    from calc.estimate import estimate_memory, spread_caveats

    if profile_for is None:
        from calc.profiles import get_profile as profile_for
    data = load_measurements(path)
    rows = []
    for case in data["cases"]:
        if "peak_bytes" not in case:  # a run that failed is kept in the file with its error
            continue
        spec = spec_from_dict(case["spec"])
        config = replace(config_from_dict(case["config"]), device=measured_device(data, case))
        profile = profile_for(spec)
        predicted = estimate_memory(profile, config).peak_bytes
        # One run per case (the GPU slice) has no spread.
        rows.append(ValidationRow(case["case"], spec, config, case["peak_bytes"], case.get("spread", 0.0), predicted,
                                  tuple(case.get("peaks_bytes", ())), tuple(spread_caveats(profile, config))))
    return rows



# The XLA data files the plan is scored on: TensorFlow's XLA step (jit_compile=True) and
# Keras's JAX backend with XLA's autotuner off and on, all on an H100.
XLA_DATA = (GPU_TF_XLA_DATA, GPU_JAX_DATA, DATA_DIR / "gpu_jax_h100.json")
XLA_TARGET = "h100-80"


def validate_plan(path: Path = GPU_TF_XLA_DATA, gpu_key: str = XLA_TARGET, plan_for=None) -> list[ValidationRow]:
    """XLA's plan (``calc.xla``) for every measured case of an XLA data file.

    ``plan_for(spec, config, gpu_key)`` returns an ``XlaPlan`` (default: ``compute_plan``,
    from the shipped plans or compiled once).
    """
    if plan_for is None:
        from calc.xla import compute_plan as plan_for
    data = load_measurements(path)
    rows = []
    for case in data["cases"]:
        if "peak_bytes" not in case:
            continue
        spec = spec_from_dict(case["spec"])
        config = replace(config_from_dict(case["config"]), device=Device.GPU)
        predicted = plan_for(spec, config, gpu_key).peak_bytes
        rows.append(ValidationRow(case["case"], spec, config, case["peak_bytes"], case.get("spread", 0.0) or 0.0,
                                  predicted, tuple(case.get("peaks_bytes", ()))))
    return rows


def plan_report_path(data: Path) -> Path:
    """Where ``python -m calc validate --step xla --data DATA --save`` writes its report."""
    return data.with_name(data.stem + "_plan_report.json")

@dataclass(frozen=True)
class ErrorSummary:
    cases: int
    median_abs: float
    p90_abs: float
    max_abs: float
    under_count: int
    worst_under: float
    worst_over: float = 0.0  # the largest over-prediction (0 when none)
    within_runs: int = 0  # predictions inside their case's range of measured runs
    median_from_runs: float = 0.0  # |error_from_nearest_run|
    max_from_runs: float = 0.0


def summarize(rows: list[ValidationRow]) -> ErrorSummary:
    errors = sorted(abs(r.relative_error) for r in rows)
    if not errors:
        raise ValueError("No measured cases to summarize.")
    unders = [r.relative_error for r in rows if r.relative_error < 0]
    p90 = errors[min(len(errors) - 1, int(round(0.9 * (len(errors) - 1))))]
    return ErrorSummary(
        cases=len(errors),
        median_abs=statistics.median(errors),
        p90_abs=p90,
        max_abs=errors[-1],
        under_count=len(unders),
        worst_under=min(unders, default=0.0),
        worst_over=max(0.0, max(r.relative_error for r in rows)),
        within_runs=sum(r.error_from_nearest_run == 0.0 for r in rows),
        median_from_runs=statistics.median(abs(r.error_from_nearest_run) for r in rows),
        max_from_runs=max(abs(r.error_from_nearest_run) for r in rows),
    )


# The group of cases that carry none of spread_caveats' kinds.
NO_CAVEAT = "none"
# How a record's sentence names the steps of each kind (``record_sentence``).
CAVEAT_STEPS = {"large_variable": "steps with such a variable", "large_fixed_request": "steps with such a request",
                "inference_layout": "frozen or last-N steps",
                "updates_together": "mixed_float16 steps whose peak is the update",
                "float16_buffer": "mixed_float16 steps whose peak is a float16 kernel's buffer"}


@dataclass(frozen=True)
class CaveatRecord:
    """How the estimate fared on the measured cases that carry one caveat kind."""

    cases: int
    lowest_error: float  # against the median run
    highest_error: float
    margin_for_every_run: float  # the safety margin that covers every run of every case


def caveat_records(rows: list[ValidationRow]) -> dict[str, CaveatRecord]:
    """Per caveat kind of ``calc.estimate.spread_caveats`` (and ``NO_CAVEAT``), the measured record.

    A case with several kinds counts under each of them.
    """
    groups: dict[str, list[ValidationRow]] = {}
    for r in rows:
        for kind in r.caveats or (NO_CAVEAT,):
            groups.setdefault(kind, []).append(r)
    return {kind: CaveatRecord(len(g), min(r.relative_error for r in g), max(r.relative_error for r in g),
                               max(r.margin_for_every_run for r in g))
            for kind, g in sorted(groups.items())}


def records_as_json(records: dict[str, CaveatRecord]) -> dict[str, dict[str, Any]]:
    """``caveat_records``' result as the report and ``validate --json`` write it."""
    return {kind: asdict(record) for kind, record in records.items()}


def record_sentence(record: CaveatRecord, steps: str) -> str:
    """The record in words, e.g. ``steps="ConvNeXt steps"``; no final full stop."""
    return (f"on {record.cases} measured {steps} the estimate was off by {record.lowest_error:+.0%} to "
            f"{record.highest_error:+.0%} against the median run, and a safety margin of "
            f"{record.margin_for_every_run:.0%} covers every single run")


def gpu_record_sentence(record: CaveatRecord, steps: str) -> str:
    """``record_sentence`` for a record of the H100 slice (``GPU_TF_REPORT``)."""
    return f"with TensorFlow on an H100, {record_sentence(record, steps)}"


OWN_MODEL_STEPS = "steps of own models (saved files that are not Keras applications)"


def overall_record(report: dict[str, Any]) -> CaveatRecord | None:
    """The record of every case in a saved report (for a file: the own-model slice's,
    ``CUSTOM_REPORT``); None when the report has no cases."""
    try:
        rows = [(c["relative_error"], c["predicted_bytes"], c.get("runs_bytes") or [c["measured_bytes"]])
                for c in report["cases"]]
    except (KeyError, TypeError):
        return None
    if not rows:
        return None
    return CaveatRecord(len(rows), min(e for e, _, _ in rows), max(e for e, _, _ in rows),
                        max(margin_for_runs(runs, predicted) for _, predicted, runs in rows))


def caveat_record(report: dict[str, Any], kind: str) -> CaveatRecord | None:
    """One kind's record from a saved report; None when the report has none for it."""
    try:
        return CaveatRecord(**report["summary"]["caveats"][kind])
    except (KeyError, TypeError):
        return None


CPU_REPORT = DATA_DIR / "validation_cpu_report.json"


def report_path(data: Path) -> Path:
    """Where ``python -m calc validate --data DATA --save`` writes its report."""
    return CPU_REPORT if data == CPU_DATA else data.with_name(data.stem + "_report.json")


GPU_TF_REPORT = report_path(GPU_TF_DATA)
GPU_TF_XLA_REPORT = report_path(GPU_TF_XLA_DATA)
GPU_JAX_REPORT = report_path(GPU_JAX_DATA)
CUSTOM_REPORT = report_path(CUSTOM_DATA)


def save_report(rows: list[ValidationRow], path: Path = CPU_REPORT) -> None:
    """Writes predicted vs measured per case and the summary (read by the dashboard)."""
    s = summarize(rows)
    path.write_text(json.dumps({
        "summary": {"cases": s.cases, "median_abs_error": s.median_abs, "p90_abs_error": s.p90_abs,
                    "max_abs_error": s.max_abs, "under_predicted": s.under_count,
                    "worst_under_prediction": s.worst_under,
                    "worst_over_prediction": s.worst_over,
                    "within_measured_runs": s.within_runs, "median_abs_error_from_nearest_run": s.median_from_runs,
                    "max_abs_error_from_nearest_run": s.max_from_runs,
                    "caveats": records_as_json(caveat_records(rows)),
                    "reproducibility": reproducibility_json(rows),
                    "estimate_against_runs": reproducibility_json(rows, against_prediction=True)},
        "cases": [{"case": r.case, "measured_bytes": r.measured_bytes, "predicted_bytes": r.predicted_bytes,
                   "relative_error": r.relative_error, "measured_spread": r.spread,
                   "runs_bytes": list(r.runs_bytes), "caveats": list(r.caveats)} for r in rows],
    }, indent=1) + "\n")


def load_report(path: Path = CPU_REPORT) -> dict[str, Any]:
    """The committed report; raises ``OSError``/``ValueError`` when missing or damaged."""
    return json.loads(path.read_text())
