import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
import keras, numpy as np
from keras import layers as L
name=sys.argv[1]; kw={}
if name=="sgdm": name="sgd"; kw={"momentum":0.9}
if name=="rmspropm": name="rmsprop"; kw={"momentum":0.9}
opt=(keras.optimizers.Lamb if name=="lamb" else keras.optimizers.get(name).__class__)(**kw)
inp=keras.Input((4096,)); x=L.Dense(4096,use_bias=False)(inp); out=L.Dense(10,use_bias=False)(x)
m=keras.Model(inp,out); m.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
xb=np.random.rand(8,4096).astype("float32"); yb=np.random.randint(0,10,size=(8,))
m.train_on_batch(xb,yb)
tf.config.experimental.reset_memory_stats("CPU:0")
c0=tf.config.experimental.get_memory_info("CPU:0")["current"]
m.train_on_batch(xb,yb)
pk=tf.config.experimental.get_memory_info("CPU:0")["peak"]
print(f"{sys.argv[1]:10s} resident {c0/2**26:.2f} vars, step extra {(pk-c0)/2**26:.2f} vars (64 MiB each)")
