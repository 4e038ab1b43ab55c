#!/usr/bin/python3
"""The PyTorch side of bench/cnn.sh: the CNN of `vkt train --model cnn` (conv 3x3 1->16
pad 1, relu, maxpool 2, conv 3x3 16->32 pad 1, relu, maxpool 2, linear 1568->10; softmax
cross-entropy; SGD lr 0.1 momentum 0.9, batch 64) trained on the CPU on an MNIST-style
folder, shuffled every epoch, the whole loop timed from the first step (batch gathering
included), like `vkt train`. Every step reads the loss back (loss.item()), as
vkt_trainer_step returns it. Then the test accuracy.
Last line: result: threads=<t> samples_per_s=<s> test_accuracy=<a> seconds=<t>
Run with Debian's interpreter, which has python3-torch: /usr/bin/python3 cnn_torch.py
"""
import argparse
import os
import sys
import time

import mlp_torch  # read_idx, and the thread setup shared with the MLP benchmark


def build(torch, seed):
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def load(np, torch, folder, split):
    images = mlp_torch.read_idx(os.path.join(folder, f"{split}-images-idx3-ubyte"))
    labels = mlp_torch.read_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).reshape(len(images), 1, 28, 28)
    return x, torch.from_numpy(labels.astype(np.int64))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", required=True, help="MNIST-style folder")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):  # before numpy/torch load
        os.environ[var] = str(args.threads)
    import numpy as np
    import torch
    mlp_torch.np = np
    torch.set_num_threads(args.threads)
    model = build(torch, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x_all, y_all = load(np, torch, args.data, "train")
    x_test, y_test = load(np, torch, args.data, "t10k")
    per_epoch = len(x_all) // args.batch
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        order = torch.randperm(len(x_all), generator=gen)
        for b in range(per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_all[idx]), y_all[idx])
            loss.backward()
            opt.step()
            loss.item()
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    rate = args.epochs * per_epoch * args.batch / seconds
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}: {args.epochs} epoch(s) "
          f"of {per_epoch} steps, {rate:.0f} samples/s, test accuracy {accuracy:.4f}")
    print(f"result: threads={args.threads} samples_per_s={rate:.1f} test_accuracy={accuracy:.4f} "
          f"seconds={seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
