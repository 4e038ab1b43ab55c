#!/usr/bin/python3
"""Makes the PyTorch fixtures of the safetensors import test (docs/import.md).

Trains, with Debian's python3-torch on the CPU, small versions of `vkt train`'s three
models written as PyTorch modules whose computation is the engine's (tools/models.c):

  mlp     nn.Sequential(Linear(784,64), ReLU, Linear(64,32), ReLU, Linear(32,10)): the
          names `vkt train --init-map torch` maps for --hidden 64,32 (0.weight, 2.weight, ...)
  cnn     nn.Sequential(Conv2d(1,16,3,pad 1), ReLU, MaxPool2d(2), Conv2d(16,32,3,pad 1), ReLU,
          MaxPool2d(2), Flatten, Linear(1568,10)): --model cnn
  charlm  a pre-norm GPT (--model charlm --width 32 --context 32 --layers 2 --heads 4),
          parameters named as nanoGPT names them (transformer.wte.weight, transformer.h.0.
          attn.c_attn.weight, ...): token and position embeddings, per block LayerNorm (eps
          1e-5), causal attention on one Linear(C, 3C) whose output holds q, k, v side by
          side (head h in columns h*C/H.. of each), softmax(q k^T / sqrt(C/H)), a Linear(C, C)
          projection, a residual; LayerNorm, Linear(C, 4C), GELU (tanh form, as the
          engine's), Linear(4C, C), a residual; a final LayerNorm and a Linear(C, vocab) head

each trained for a few hundred steps (so that a wrongly loaded tensor gives a loss far from
PyTorch's), rounds some tensors to BF16 and F16 (stored so; the model then holds the
rounded values, so PyTorch's loss is the loss of exactly what the file holds), and writes:

  <out>/mlp.safetensors, cnn.safetensors, charlm.safetensors   (written here with Python's
      standard library: 8-byte little-endian header length, JSON header, data; no
      safetensors package is needed)
  <out>/expected.txt   key=value lines: each model's loss on one fixed batch, computed by
      PyTorch in float32 and in float64 (the first loss a trainer importing the file must
      report), and the batch:
        mlp, cnn: the first 128 training images of data/mnist in stored order
        charlm:   8 windows of 32 characters of data/austen/pride_and_prejudice.txt starting
                  at byte 1000 * i (i = 0..7), targets the next characters; ids by the
                  sorted distinct bytes of the whole text (vkt_text_load's vocabulary)

Run: /usr/bin/python3 tests/import/make_fixtures.py [--out DIR]   (default: this folder)
Deterministic for a given PyTorch build: seeded, one thread.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Sizes (the C test builds the same with tools/models.c).
MLP_HIDDEN = (64, 32)
LM = dict(width=32, context=32, layers=2, heads=4)
BATCH = 128            # mlp and cnn: rows of the loss batch
LM_WINDOWS = 8         # charlm: windows of the loss batch
LM_STRIDE = 1000       # ... starting at byte LM_STRIDE * i


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mnist_train():
    d = os.path.join(ROOT, "data", "mnist")
    x = read_idx(os.path.join(d, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    # as engine/data/idx.c: pixel * (1.0f / 255.0f) in float32
    x = x.astype(np.float32) * (np.float32(1.0) / np.float32(255.0))
    return torch.from_numpy(x), torch.from_numpy(y)


def mlp():
    a, b = MLP_HIDDEN
    return nn.Sequential(nn.Linear(784, a), nn.ReLU(), nn.Linear(a, b), nn.ReLU(),
                         nn.Linear(b, 10))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(32 * 7 * 7, 10))

    def forward(self, x):
        return self.net(x.view(-1, 1, 28, 28))

    def state(self):  # the names of the plain nn.Sequential (0.weight, ...)
        return {k[len("net."):]: v for k, v in self.state_dict().items()}


class Attention(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLPBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = Attention(c, heads)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = MLPBlock(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class CharLM(nn.Module):
    def __init__(self, vocab, width, context, layers, heads):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width), wpe=nn.Embedding(context, width),
            h=nn.ModuleList([Block(width, heads) for _ in range(layers)]),
            ln_f=nn.LayerNorm(width, eps=1e-5)))
        self.lm_head = nn.Linear(width, vocab)
        for p in self.parameters():  # GPT-style small init, as the engine's
            if p.dim() > 1:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, ids):
        t = self.transformer
        x = t.wte(ids) + t.wpe.weight[: ids.shape[1]]
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))


def text_batch(text, vocab):
    lut = {c: i for i, c in enumerate(vocab)}
    T = LM["context"]
    ids = [[lut[c] for c in text[LM_STRIDE * i: LM_STRIDE * i + T]] for i in range(LM_WINDOWS)]
    tgt = [[lut[c] for c in text[LM_STRIDE * i + 1: LM_STRIDE * i + T + 1]]
           for i in range(LM_WINDOWS)]
    return torch.tensor(ids), torch.tensor(tgt)


def train(model, loss_of, batches, steps, opt):
    for step in range(steps):
        opt.zero_grad()
        loss = loss_of(model, *batches(step))
        loss.backward()
        opt.step()
    return float(loss)


# The dtype each tensor is stored in (others F32): the three the engine reads, in each file.
ROUNDING = {
    "mlp": {"0.weight": torch.bfloat16, "2.weight": torch.float16, "4.bias": torch.float16},
    "cnn": {"3.weight": torch.bfloat16, "7.weight": torch.float16},
    "charlm": {"transformer.wte.weight": torch.float16,
               "transformer.h.0.mlp.c_fc.weight": torch.bfloat16,
               "transformer.h.1.attn.c_attn.weight": torch.bfloat16,
               "lm_head.bias": torch.float16},
}
NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def round_state(state, rounding):
    """Each tensor in its stored dtype, and its float32 value after that rounding."""
    stored, values = {}, {}
    for name, t in state.items():
        dt = rounding.get(name, torch.float32)
        stored[name] = t.detach().to(dt).clone().contiguous()
        values[name] = stored[name].to(torch.float32)
    return stored, values


def save_safetensors(path, stored):
    """The format, by hand: JSON header (8-byte aligned with spaces), little-endian data."""
    header = {"__metadata__": {"format": "pt", "source": "tests/import/make_fixtures.py",
                               "torch": torch.__version__}}
    blobs, at = [], 0
    for name, t in stored.items():
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t  # numpy has no bf16
        b = raw.numpy().astype(raw.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def losses(model, values, loss_of, batch, load):
    """Float32 and float64 losses of `values` on the batch."""
    out = []
    for dtype in (torch.float32, torch.float64):
        load(model, values)
        m = model.to(dtype)
        with torch.no_grad():
            out.append(float(loss_of(m, *(t.to(dtype) if t.is_floating_point() else t
                                           for t in batch))))
    model.to(torch.float32)
    return out


def classifier_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def lm_loss(model, ids, tgt):
    logits = model(ids)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    expected = {"torch_version": torch.__version__}

    x, y = mnist_train()
    g = torch.Generator().manual_seed(1)

    def mnist_batches(step):
        idx = torch.randint(0, x.shape[0], (64,), generator=g)
        return x[idx], y[idx]

    loss_batch = (x[:BATCH], y[:BATCH])
    for name, model, steps, lr in (("mlp", None, 300, 0.1), ("cnn", None, 150, 0.05)):
        torch.manual_seed(1)
        model = mlp() if name == "mlp" else CNN()
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        train(model, classifier_loss, mnist_batches, steps, opt)
        state = model.state_dict() if name == "mlp" else model.state()
        stored, values = round_state(state, ROUNDING[name])
        save_safetensors(os.path.join(args.out, name + ".safetensors"), stored)

        def load(m, v, name=name):
            target = m if name == "mlp" else m.net
            target.load_state_dict(v)
        l32, l64 = losses(model, values, classifier_loss, loss_batch, load)
        expected[name + "_loss_f32"] = l32
        expected[name + "_loss_f64"] = l64

    with open(os.path.join(ROOT, "data", "austen", "pride_and_prejudice.txt"), "rb") as f:
        text = f.read()
    vocab = sorted(set(text))
    torch.manual_seed(1)
    lm = CharLM(len(vocab), LM["width"], LM["context"], LM["layers"], LM["heads"])
    data = torch.tensor(list(text))
    lut = torch.zeros(256, dtype=torch.long)
    lut[torch.tensor(vocab)] = torch.arange(len(vocab))
    train_ids = lut[data[: int(len(text) * 0.9)]]
    T = LM["context"]

    def lm_batches(step):
        at = torch.randint(0, len(train_ids) - T - 1, (32,), generator=g)
        win = torch.stack([train_ids[a: a + T + 1] for a in at.tolist()])
        return win[:, :-1], win[:, 1:]

    opt = torch.optim.AdamW(lm.parameters(), lr=3e-3, weight_decay=0.0)
    train(lm, lm_loss, lm_batches, 400, opt)
    stored, values = round_state(lm.state_dict(), ROUNDING["charlm"])
    save_safetensors(os.path.join(args.out, "charlm.safetensors"), stored)
    l32, l64 = losses(lm, values, lm_loss, text_batch(text, vocab),
                      lambda m, v: m.load_state_dict(v))
    expected["charlm_loss_f32"] = l32
    expected["charlm_loss_f64"] = l64
    expected["charlm_vocab"] = len(vocab)

    with open(os.path.join(args.out, "expected.txt"), "w") as f:
        f.write("# made by tests/import/make_fixtures.py (PyTorch); read by "
                "tests/test_import_torch.c\n")
        for k, v in expected.items():
            f.write("%s=%s\n" % (k, repr(v) if isinstance(v, float) else v))
    for k, v in expected.items():
        print("%s=%s" % (k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
