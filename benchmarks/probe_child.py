"""What every probe's child process starts with: TensorFlow on one inter-op and one
intra-op thread (the measurement protocol, ../shared/MEMORY_FACTS.md), Keras, and the
engine. A probe's CHILD code is ``PREAMBLE`` followed by its own lines; ``ROOT`` is
substituted by the probe before it runs the child."""

PREAMBLE = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
import keras, numpy as np
from keras import layers as L
sys.path.insert(0, ROOT)
from calc.keras_adapter import profile_model
from calc.estimate import estimate_memory
from calc.types import TrainingConfig
'''
