#!/usr/bin/python3
"""The PyTorch side of bench/train.sh: the 784-256-128-10 MLP (relu, softmax
cross-entropy, SGD lr 0.1, batch 128) trained on the CPU, timed like vktrain.

Two loops, as on the vktrain side:
  bench  (default) like `vkt bench train`: a few pre-made random batches cycled through,
         warm-up steps, then every step timed alone; prints the best and median step.
  data   (--data DIR) like `vkt train`: an MNIST-style folder (IDX files, plain or .gz),
         a new shuffled order every epoch, the whole loop timed (batch gathering
         included, from the first step on); prints samples/s over the loop.
Every step reads the loss back (loss.item()), as vkt_trainer_step returns it.

The bench loop also times the step's matrix products alone (torch.mm, the products
`vkt bench train` times), for the step / GEMM ratio on the PyTorch side.
Last line: result: threads=<t> step_ms=<best> median_ms=<m> samples_per_s=<s>
           cpu_ms_per_step=<c> [gemm_ms=<g>]
Run with Debian's interpreter, which has python3-torch: /usr/bin/python3 mlp_torch.py
"""
import argparse
import gzip
import os
import statistics
import struct
import sys
import time

# numpy and torch load OpenBLAS, which sizes its thread pool from OPENBLAS_NUM_THREADS
# when it loads: main() imports them once --threads is in the environment.
np = None
torch = None

DIMS = (784, 256, 128, 10)
FEED_BATCHES = 8  # random batches cycled through, as in `vkt bench train`


def read_idx(path):
    """An IDX file (plain, or path + '.gz') as a numpy array of its stored shape."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def build(seed):
    torch.manual_seed(seed)
    layers = []
    for i in range(len(DIMS) - 1):
        layers.append(torch.nn.Linear(DIMS[i], DIMS[i + 1]))
        if i + 2 < len(DIMS):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def step(model, opt, loss_fn, x, y):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def bench_loop(args, model, opt, loss_fn):
    """Pre-made random batches; each step timed alone. Returns (times, cpu, loss)."""
    gen = torch.Generator().manual_seed(args.seed)
    xs = torch.rand(FEED_BATCHES, args.batch, DIMS[0], generator=gen)
    ys = torch.randint(0, DIMS[-1], (FEED_BATCHES, args.batch), generator=gen)
    for i in range(args.warmup):
        step(model, opt, loss_fn, xs[i % FEED_BATCHES], ys[i % FEED_BATCHES])
    times, loss = [], 0.0
    c0 = time.process_time()
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = step(model, opt, loss_fn, xs[i % FEED_BATCHES], ys[i % FEED_BATCHES])
        times.append(time.perf_counter() - t0)
    return times, (time.process_time() - c0) / args.steps, loss


def gemm_only(args):
    """The step's matrix products alone (as `vkt bench train` times them): forward
    Z = A W, backward dW = A^T dZ and dA = dZ W^T (none for the input), into preallocated
    outputs. Returns the best of args.steps runs, in seconds."""
    gen = torch.Generator().manual_seed(args.seed)
    n = len(DIMS) - 1
    x = torch.rand(args.batch, DIMS[0], generator=gen)
    w = [torch.rand(DIMS[i], DIMS[i + 1], generator=gen) * 0.05 for i in range(n)]
    z = [torch.empty(args.batch, DIMS[i + 1]) for i in range(n)]
    dw = [torch.empty(DIMS[i], DIMS[i + 1]) for i in range(n)]
    da = [torch.empty(args.batch, DIMS[i]) for i in range(n)]

    def run():
        a = x
        for i in range(n):
            torch.mm(a, w[i], out=z[i])
            a = z[i]
        dz = z[n - 1]
        for i in reversed(range(n)):
            torch.mm(x.t() if i == 0 else z[i - 1].t(), dz, out=dw[i])
            if i:
                torch.mm(dz, w[i].t(), out=da[i])
                dz = da[i]

    for _ in range(args.warmup):
        run()
    best = float("inf")
    for _ in range(args.steps):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def data_loop(args, model, opt, loss_fn):
    """The shipped (or given) digits, shuffled per epoch; the whole loop timed."""
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte"))
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte"))
    x_all = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    y_all = torch.from_numpy(labels.astype(np.int64))
    per_epoch = len(x_all) // args.batch
    gen = torch.Generator().manual_seed(args.seed)
    steps = args.steps if args.steps else args.epochs * per_epoch
    done, loss = 0, 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    while done < steps:
        order = torch.randperm(len(x_all), generator=gen)
        for b in range(per_epoch):
            if done == steps:
                break
            idx = order[b * args.batch:(b + 1) * args.batch]
            loss = step(model, opt, loss_fn, x_all[idx], y_all[idx])
            done += 1
    seconds = time.perf_counter() - t0
    return [seconds / steps], (time.process_time() - c0) / steps, loss, steps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--steps", type=int, default=300,
                   help="timed steps (bench) or steps (data; 0 = --epochs)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (bench)")
    p.add_argument("--epochs", type=int, default=4, help="with --data and --steps 0")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", help="MNIST-style folder: time the data loop instead")
    args = p.parse_args()
    # Debian's torch does its matrix products in OpenBLAS (BLAS_INFO=generic, libblas.so.3
    # -> openblas-pthread), whose own thread pool ignores torch.set_num_threads: it reads
    # OPENBLAS_NUM_THREADS when it loads (with numpy or torch), so set that (and OpenMP's)
    # before either is imported.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    global np, torch
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    model = build(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    dims = "-".join(map(str, DIMS))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()} (OPENBLAS_NUM_THREADS="
          f"{args.threads}), {os.cpu_count()} cpus; {dims} relu, batch {args.batch}, "
          f"SGD lr {args.lr}")
    if args.data:
        times, cpu, loss, steps = data_loop(args, model, opt, loss_fn)
        best = med = times[0]
        rate = args.batch / med
        print(f"data loop ({args.data}): {steps} steps, {rate:.0f} samples/s over the loop, "
              f"final loss {loss:.4f}")
    else:
        times, cpu, loss = bench_loop(args, model, opt, loss_fn)
        best, med = min(times), statistics.median(times)
        rate = args.batch / best
        gemm = gemm_only(args)
        print(f"{args.steps} timed steps after {args.warmup}: best {best * 1e3:.3f} ms, median "
              f"{med * 1e3:.3f} ms, final loss {loss:.4f}; the step's GEMMs alone: best "
              f"{gemm * 1e3:.3f} ms (step / GEMMs {best / gemm:.2f})")
    extra = "" if args.data else f" gemm_ms={gemm * 1e3:.3f}"
    print(f"result: threads={args.threads} step_ms={best * 1e3:.3f} median_ms={med * 1e3:.3f} "
          f"samples_per_s={rate:.0f} cpu_ms_per_step={cpu * 1e3:.3f}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
