#!/usr/bin/python3
"""The PyTorch side of bench/gpu.sh: the work vktrain does there, on the same card (fp32,
TF32 off unless named), each figure on one line:

  torch: <figure> key=value ...

fp32 GEMM (square sizes, and the transposed shapes of the char LM's weight gradients),
the MLP and CNN training steps (SGD with momentum, the loss read back every step, as
vkt_trainer_step returns it), the MNIST data loop, and the char LM (vktrain's charlm
architecture: pre-norm blocks, causal attention, 4x GELU MLP, learned positions, AdamW),
and causal attention forward + backward alone (scaled_dot_product_attention) at the
shapes bench/gpu.sh gives in ATTN_SHAPES ("context,head size,batch,heads ..."). A figure
that fails prints `torch: <figure> error=...` and the others go on. The figures issue 20
sets targets on come first, the MNIST data loop last.

--device cpu --quick runs every section small on the CPU: a check of the script where
there is no GPU (scripts/install-deps.sh --bench installs Debian's python3-torch; run it
with /usr/bin/python3). Its figures compare nothing.
"""
import argparse
import gzip
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda")
ap.add_argument("--quick", action="store_true", help="small sizes, few iterations")
ap.add_argument("--data", help="MNIST-style folder for the data loop")
ap.add_argument("--text", help="text file for the char LM's vocabulary")
ap.add_argument("--only", default="", help="comma-separated sections (default: all)")
args = ap.parse_args()
dev = args.device
cuda = dev.startswith("cuda")
if cuda and not torch.cuda.is_available():
    print("gpu_torch.py: torch.cuda.is_available() is False (no CUDA GPU, or a CPU-only "
          "PyTorch)", file=sys.stderr)
    sys.exit(2)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
name = torch.cuda.get_device_name(0) if cuda else "cpu"
print(f"torch: version={torch.__version__} device={name.replace(' ', '_')}", flush=True)
Q = args.quick


def sync():
    if cuda:
        torch.cuda.synchronize()


def timed(fn, iters, warm=5):
    """(best, median) seconds of fn() over iters timed calls after warm ones."""
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return min(ts), statistics.median(ts)


def section(key):
    return not args.only or key in args.only.split(",")


def guard(label, fn):
    try:
        fn()
    except Exception as e:  # one figure's failure (out of memory, say) leaves the others
        print(f"torch: {label} error={type(e).__name__}:{str(e)[:120].replace(' ', '_')}",
              flush=True)


def gemm_square():
    for n in ((256, 512) if Q else (1024, 2048, 4096, 8192)):
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        c = torch.empty(n, n, device=dev)
        best, med = timed(lambda: torch.mm(a, b, out=c), 3 if Q else 20 if n <= 4096 else 8)
        print(f"torch: gemm n={n} best_tflops={2 * n ** 3 / best / 1e12:.3f} "
              f"median_tflops={2 * n ** 3 / med / 1e12:.3f}", flush=True)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        n = 8192
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        best, _ = timed(lambda: torch.mm(a, b), 8)
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"torch: gemm_tf32 n={n} best_tflops={2 * n ** 3 / best / 1e12:.3f}", flush=True)


# C[M,N] = op(A) op(B) with A stored K x M when trans_a (A^T), B stored N x K when trans_b:
# the char LM's products at width 384, context 256, batch 64 (16384 rows) and at its
# default shape (2048 rows, width 64), as bench/gpu.sh passes them to vkt bench gemm.
SHAPES = os.environ.get("GEMM_SHAPES", "").split() or [
    "2048,64,64,0,0", "64,192,2048,1,0", "2048,192,64,0,1",
    "16384,1536,384,0,0", "384,1536,16384,1,0", "16384,384,1536,0,1"]


def gemm_shapes():
    for s in SHAPES:
        m, n, k, ta, tb = (int(v) for v in s.split(",")[:5])
        a = torch.randn(*((k, m) if ta else (m, k)), device=dev)
        b = torch.randn(*((n, k) if tb else (k, n)), device=dev)
        opa, opb = (a.t() if ta else a), (b.t() if tb else b)
        best, _ = timed(lambda: torch.mm(opa, opb), 3 if Q else 20)
        print(f"torch: gemm_shape shape={m},{n},{k},{ta},{tb} "
              f"best_tflops={2 * m * n * k / best / 1e12:.4f} best_us={best * 1e6:.1f}",
              flush=True)


def mlp(dims):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).to(dev)


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10)).to(dev)


def step_time(model, shape, batch, lr, iters):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    lf = nn.CrossEntropyLoss()
    xs = [torch.rand(batch, *shape, device=dev) for _ in range(8)]
    ys = [torch.randint(0, 10, (batch,), device=dev) for _ in range(8)]
    k = [0]

    def st():
        i = k[0] % 8
        k[0] += 1
        opt.zero_grad(set_to_none=True)
        loss = lf(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        return loss.item()
    return timed(st, iters, warm=3 if Q else 20)


def steps():
    for batch in (128, 1024):
        best, med = step_time(mlp((784, 256, 128, 10)), (784,), batch, 0.1, 10 if Q else 200)
        print(f"torch: mlp_step batch={batch} best_ms={best * 1e3:.3f} median_ms={med * 1e3:.3f}",
              flush=True)
    if not Q:
        best, med = step_time(mlp((784, 4096, 4096, 10)), (784,), 1024, 0.01, 50)
        print(f"torch: mlp4096_step batch=1024 best_ms={best * 1e3:.3f} "
              f"median_ms={med * 1e3:.3f}", flush=True)
    for batch in (64, 512):
        best, med = step_time(cnn(), (1, 28, 28), batch, 0.1, 3 if Q else 200)
        print(f"torch: cnn_step batch={batch} best_ms={best * 1e3:.3f} median_ms={med * 1e3:.3f}",
              flush=True)


def read_idx(path):
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    _, _, ndim = struct.unpack(">HBB", data[:4])
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def data_loop():
    d = args.data
    x_all = (read_idx(f"{d}/train-images-idx3-ubyte").float() / 255).reshape(-1, 784).to(dev)
    y_all = read_idx(f"{d}/train-labels-idx1-ubyte").long().to(dev)
    for batch in (128, 1024):
        torch.manual_seed(1)
        model = mlp((784, 256, 128, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        lf = nn.CrossEntropyLoss()
        per = len(x_all) // batch
        epochs = 1 if Q else 10
        sync()
        t = time.perf_counter()
        for _ in range(epochs):
            order = torch.randperm(len(x_all), device=dev)
            for b in range(per):
                idx = order[b * batch:(b + 1) * batch]
                opt.zero_grad(set_to_none=True)
                loss = lf(model(x_all[idx]), y_all[idx])
                loss.backward()
                opt.step()
                loss.item()
        sync()
        s = time.perf_counter() - t
        print(f"torch: mlp_data_loop batch={batch} samples_per_s={epochs * per * batch / s:.0f}",
              flush=True)


def causal_attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2: the fused kernels
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]  # PyTorch 1 (Debian 12's, for --device cpu): the plain formula
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return att.masked_fill(mask, float("-inf")).softmax(-1) @ v


def charlm(c, L, H, T, B, amp):
    text = open(args.text, encoding="utf-8").read() if args.text else "".join(map(chr, range(32, 107)))
    V = len(set(text))

    class Block(nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1, s.qkv, s.proj = nn.LayerNorm(c), nn.Linear(c, 3 * c), nn.Linear(c, c)
            s.ln2, s.fc, s.fc2 = nn.LayerNorm(c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(s, x):
            b, t, _ = x.shape
            q, k, v = s.qkv(s.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
            y = causal_attention(q, k, v)
            x = x + s.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + s.fc2(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

    class LM(nn.Module):
        def __init__(s):
            super().__init__()
            s.tok, s.pos = nn.Embedding(V, c), nn.Parameter(torch.zeros(T, c))
            s.blocks = nn.ModuleList(Block() for _ in range(L))
            s.lnf, s.head = nn.LayerNorm(c), nn.Linear(c, V)

        def forward(s, idx):
            x = s.tok(idx) + s.pos
            for b in s.blocks:
                x = b(x)
            return s.head(s.lnf(x))

    m = LM().to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    xs = [torch.randint(0, V, (B, T), device=dev) for _ in range(4)]
    ys = [torch.randint(0, V, (B, T), device=dev) for _ in range(4)]
    k = [0]

    def step():
        i = k[0] % 4
        k[0] += 1
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(m(xs[i]).view(-1, V), ys[i].view(-1))
        loss.backward()
        opt.step()
        return loss.item()
    best, med = timed(step, 3 if Q else 40, warm=2 if Q else 10)
    print(f"torch: charlm precision={'bf16-autocast' if amp else 'fp32'} width={c} layers={L} "
          f"heads={H} context={T} batch={B} params={sum(p.numel() for p in m.parameters())} "
          f"best_ms={best * 1e3:.3f} median_ms={med * 1e3:.3f}", flush=True)


ATTN = os.environ.get("ATTN_SHAPES", "").split() or (
    ["64,32,2,2"] if Q else ["256,64,64,4", "1024,64,16,4", "2048,32,8,4", "2048,64,8,4",
                             "2048,128,8,4"])


def attention():
    """Causal attention on [batch, heads, context, head size] fp32 tensors: forward alone,
    and forward + backward (the gradients of q, k and v), best ms of each."""
    for s in ATTN:
        t, d, b, h = (int(v) for v in s.split(","))
        q, k, v = (torch.randn(b, h, t, d, device=dev, requires_grad=True) for _ in range(3))
        dy = torch.randn(b, h, t, d, device=dev)

        def fwd():
            with torch.no_grad():
                causal_attention(q, k, v)

        def fwdbwd():
            q.grad = k.grad = v.grad = None
            causal_attention(q, k, v).backward(dy)
        iters = 3 if Q else 20
        f, _ = timed(fwd, iters)
        fb, _ = timed(fwdbwd, iters)
        print(f"torch: attention shape={s} context={t} head={d} batch={b} heads={h} "
              f"fwd_ms={f * 1e3:.3f} fwdbwd_ms={fb * 1e3:.3f}", flush=True)


if section("gemm"):
    guard("gemm", gemm_square)
if section("shapes"):
    guard("gemm_shape", gemm_shapes)
if section("steps"):
    guard("steps", steps)
if section("lm"):
    guard("charlm", lambda: charlm(64, 2, 4, 64, 32, False))
    if not Q:
        guard("charlm", lambda: charlm(384, 6, 6, 256, 64, False))
        if cuda:
            guard("charlm", lambda: charlm(384, 6, 6, 256, 64, True))
if section("attention"):
    guard("attention", attention)
if section("data") and args.data:
    guard("mlp_data_loop", data_loop)
