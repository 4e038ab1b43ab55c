#!/usr/bin/python3
"""python_mlp - examples/mnist_mlp in Python: an MLP defined with the vktrain module and
trained on NumPy arrays.

The digits are read into NumPy arrays here, with the standard library and NumPy only (the
gzipped IDX files of an MNIST-style folder), handed to the library as data sets
(vktrain.Dataset copies them), and a 784-256-128-10 perceptron with relu is trained
exactly as the C example trains it: batches of 128 in a seeded order, SGD with momentum
0.9 at a peak learning rate of 0.2 along a cosine over 10 epochs, evaluated on the test
split after every epoch.

Usage: train_mlp.py [DATA_DIR]   (default: $VKT_DATA_DIR, else data/mnist)
Ends with "result: test_accuracy=0.9xxx test_loss=0.xxxx". Needs the vktrain module
(cmake --install puts it where Debian's python3 finds it; docs/python.md) and NumPy
(python3-numpy).
"""
import gzip
import os
import struct
import sys
import time

import numpy as np

import vktrain

BATCH, EPOCHS, SEED = 128, 10, 1


def read_idx(path):
    """An IDX file (plain or .gz) as a NumPy array of its shape."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(folder, split):
    x = read_idx(os.path.join(folder, split + "-images-idx3-ubyte"))
    y = read_idx(os.path.join(folder, split + "-labels-idx1-ubyte"))
    # pixels to [0, 1] as the library's own loader does: p * (1/255) in float32
    return x.reshape(len(x), -1).astype(np.float32) * (np.float32(1) / np.float32(255)), y


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("VKT_DATA_DIR", "data/mnist")
    x_train, y_train = load(folder, "train")
    x_test, y_test = load(folder, "t10k")
    print("data: %d training and %d test samples from %s (NumPy arrays)" %
          (len(x_train), len(x_test), folder))
    train = vktrain.Dataset(x_train, y_train, classes=10)
    test = vktrain.Dataset(x_test, y_test, classes=10)

    # The model: two relu layers, the class scores (logits), the loss.
    g = vktrain.Graph(seed=SEED)
    images = g.input("images", (BATCH, x_train.shape[1]))
    labels = g.labels("labels", BATCH)
    h = g.relu(g.dense(images, 256, "fc1", init="he"))
    h = g.relu(g.dense(h, 128, "fc2", init="he"))
    logits = g.dense(h, 10, "fc3", init="glorot")
    loss = g.softmax_cross_entropy(logits, labels)

    per_epoch = len(train) // BATCH
    sgd = vktrain.SGD(lr=0.2, momentum=0.9, schedule="cosine", total_steps=EPOCHS * per_epoch)
    trainer = vktrain.Trainer(g, loss, batch=BATCH, optimizer=sgd)
    start = time.monotonic()
    for epoch in range(1, EPOCHS + 1):
        losses = []
        trainer.fit(train, images, labels, per_epoch, seed=SEED,
                    progress=lambda step, total, l: losses.append(l))
        r = trainer.evaluate(test, images, logits)
        print("epoch %2d  train_loss=%.4f  test_accuracy=%.4f  test_loss=%.4f  seconds=%.1f" %
              (epoch, np.mean(losses), r.accuracy, r.loss, time.monotonic() - start))
    print("result: test_accuracy=%.4f test_loss=%.4f" % (r.accuracy, r.loss))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except vktrain.Error as e:
        print("train_mlp: %s" % e, file=sys.stderr)
        sys.exit(1)
