"""The Python module (python/vktrain) against NumPy and the library: devices; graphs and
their errors (the library's messages as exceptions); data sets from NumPy arrays; a
training step's loss and update equal to NumPy's; predict and evaluate; fit with its
progress callback, stops, exceptions and Ctrl-C; several replicas equal to one; async
training; a 2-stage pipeline equal to one model; checkpoints; safetensors export and
import (with a dict name map); handles' lifetimes. Run by ctest (python_vktrain) under
/usr/bin/python3 with VKTRAIN_LIBRARY set to the build tree's libvktrain.so."""
import os
import shutil
import signal
import struct
import tempfile
import unittest

import numpy as np

import vktrain

DATA = os.environ.get("VKT_DATA_DIR", os.path.join(os.path.dirname(__file__), "..", "..",
                                                   "data", "mnist"))
F, C, B = 6, 3, 8


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def ce(logits, y):
    p = softmax(logits.astype(np.float64))
    return float(-np.log(p[np.arange(len(y)), y]).mean())


def linear_model(seed=3, batch=B):
    g = vktrain.Graph(seed=seed)
    x = g.input("x", (batch, F))
    y = g.labels("y", batch)
    logits = g.dense(x, C, "fc", init=("uniform", -1, 1))
    return g, x, y, logits, g.softmax_cross_entropy(logits, y)


def mlp(seed=3, batch=B, stage_split=False):
    g = vktrain.Graph(seed=seed)
    x = g.input("x", (batch, F))
    y = g.labels("y", batch)
    h = g.relu(g.dense(x, 5, "fc1", init=("uniform", -1, 1)))
    if stage_split:
        g.stage = 1
    logits = g.dense(h, C, "fc2", init=("uniform", -1, 1))
    return g, x, y, logits, g.softmax_cross_entropy(logits, y)


def batch(rng, n=B):
    return rng.standard_normal((n, F)).astype(np.float32), rng.integers(0, C, n)


class Devices(unittest.TestCase):
    def test_devices(self):
        d = vktrain.devices()
        self.assertGreater(len(d), 0)
        self.assertTrue(d[0].name)
        self.assertIn(d[0].type, ("cpu", "integrated gpu", "discrete gpu", "virtual gpu",
                                  "other"))
        self.assertTrue(vktrain.library_path)
        self.assertGreaterEqual(d[0].compute_queues, 1)
        self.assertGreaterEqual(d[0].group_size, 1)


class Graphs(unittest.TestCase):
    def test_build(self):
        g = vktrain.Graph(seed=1)
        x = g.input("x", (4, 3))
        w = g.param("w", (3, 2), "he")
        y = x @ w
        self.assertEqual(y.shape, (4, 2))
        z = g.relu(y + g.param("b", (2,)))
        self.assertEqual(g.set_name(z, "out").name, "out")
        self.assertEqual(g.find("out"), z)
        self.assertIsNone(g.find("nothing"))
        self.assertEqual((z * 2.0).shape, (4, 2))
        a, b = g.split(g.input("s", (4, 5)), 1, [2, 3])
        self.assertEqual((a.shape, b.shape), ((4, 2), (4, 3)))
        self.assertEqual(g.concat([a, b], 1).shape, (4, 5))
        self.assertEqual(g.reshape(x, (0, 3, 1)).shape, (4, 3, 1))
        img = g.input("img", (2, 1, 8, 8))
        c = g.conv2d(img, g.param("k", (4, 1, 3, 3), "he"), g.param("kb", (4,)), padding=1)
        self.assertEqual(g.max_pool2d(c, 2).shape, (2, 4, 4, 4))
        seq = g.input("seq", (2, 5, 12))
        n = g.layer_norm(seq, g.param("ga", (12,), ("constant", 1)), g.param("be", (12,)))
        self.assertEqual(g.causal_attention(g.dense(n, 36, "qkv"), 3).shape, (2, 5, 12))
        ids = g.input("ids", (2, 5))
        self.assertEqual(g.embedding(ids, g.param("tab", (7, 12), ("normal", 0, 0.02))).shape,
                         (2, 5, 12))

    def test_errors_carry_the_library_message(self):
        g = vktrain.Graph()
        a = g.input("a", (8, 3))
        b = g.param("b", (4, 2))
        with self.assertRaises(vktrain.ShapeError) as cm:
            g.matmul(a, b)
        e = cm.exception
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.status_name, "VKT_ERROR_SHAPE")
        self.assertIn("vkt_matmul: inner dimensions differ", str(e))
        self.assertIn("a [8,3] and b [4,2]", e.message)
        self.assertEqual(g.errmsg, e.message)  # the graph's first error, kept
        with self.assertRaises(vktrain.Error) as cm:  # a model cannot be made from it
            vktrain.Trainer(g, g.sum(a), batch=8)
        self.assertIn("inner dimensions differ", str(cm.exception))
        g2 = vktrain.Graph()
        with self.assertRaises(vktrain.InvalidArgumentError):
            g2.relu(a)  # a tensor of another graph
        with self.assertRaises(vktrain.InvalidArgumentError):
            g2.input("x", (1, 2, 3, 4, 5))
        with self.assertRaises(vktrain.InvalidArgumentError):
            g2.param("p", (3,), "nonsense")


class Datasets(unittest.TestCase):
    def test_from_numpy(self):
        x = np.arange(24, dtype=np.float64).reshape(4, 2, 3)
        d = vktrain.Dataset(x, [0, 2, 1, 2])
        self.assertEqual((len(d), d.features, d.classes), (4, 6, 3))
        np.testing.assert_array_equal(d.x, x.reshape(4, 6).astype(np.float32))
        np.testing.assert_array_equal(d.y, [0, 2, 1, 2])

    def test_errors(self):
        with self.assertRaises(vktrain.FormatError) as cm:
            vktrain.Dataset(np.zeros((4, 3)), [0, 1, 5, 2], classes=3)
        self.assertIn("label 5 of sample 2 is outside [0, 3)", str(cm.exception))
        with self.assertRaises(vktrain.ShapeError):
            vktrain.Dataset(np.zeros((4, 3)), [0, 1])
        with self.assertRaises(vktrain.FileError) as cm:
            vktrain.Dataset.mnist("/nonexistent/mnist")
        self.assertIn("/nonexistent/mnist", str(cm.exception))

    def test_mnist(self):
        train, test = vktrain.Dataset.mnist(DATA)
        self.assertEqual((len(train), len(test), train.features, train.classes),
                         (8000, 2000, 784, 10))


class Training(unittest.TestCase):
    def test_step_equals_numpy(self):
        rng = np.random.default_rng(1)
        g, x, y, logits, loss = linear_model()
        t = vktrain.Trainer(g, loss, batch=B, optimizer=vktrain.SGD(lr=0.5))
        w, b = t.read(g.find("fc.w")), t.read(g.find("fc.b"))
        self.assertEqual(w.shape, (F, C))
        X, Y = batch(rng)
        got = t.step({x: X, y: Y})
        z = X.astype(np.float64) @ w + b
        self.assertAlmostEqual(got, ce(z, Y), delta=1e-5 * abs(ce(z, Y)))
        # the SGD update: w - lr * X^T (softmax - onehot) / B
        G = softmax(z)
        G[np.arange(B), Y] -= 1
        G /= B
        np.testing.assert_allclose(t.read(g.find("fc.w")), w - 0.5 * X.T @ G, rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(t.read(g.find("fc.b")), b - 0.5 * G.sum(0), rtol=1e-5,
                                   atol=1e-6)
        self.assertEqual(t.step_count, 1)
        self.assertEqual(sorted(t.params()), ["fc.b", "fc.w"])
        with self.assertRaises(vktrain.ShapeError) as cm:  # checked before the library reads
            t.step({x: X[:5], y: Y})
        self.assertIn("feed 'x': 30 values; 8 rows of [6] need 48", str(cm.exception))
        with self.assertRaises(vktrain.InvalidArgumentError) as cm:
            t.step({x: X})
        self.assertIn("input 'y' is not fed", str(cm.exception))

    def test_predict_and_evaluate(self):
        rng = np.random.default_rng(2)
        g, x, y, logits, loss = mlp()
        t = vktrain.Trainer(g, loss, batch=B)
        p = t.params()
        X, Y = batch(rng, 13)  # not a multiple of the batch
        h = np.maximum(X @ p["fc1.w"] + p["fc1.b"], 0)
        want = h @ p["fc2.w"] + p["fc2.b"]
        got = t.predict({x: X}, logits)
        self.assertEqual(got.shape, (13, C))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        r = t.evaluate(vktrain.Dataset(X, Y, classes=C), x, logits)
        self.assertEqual(r.count, 13)
        self.assertAlmostEqual(r.accuracy, float((want.argmax(1) == Y).mean()), places=6)
        self.assertAlmostEqual(r.loss, ce(want, Y), delta=1e-5)

    def test_fit_progress_stop_and_errors(self):
        rng = np.random.default_rng(3)
        X, Y = batch(rng, 64)
        Y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0)  # learnable
        ds = vktrain.Dataset(X, Y, classes=C)
        g, x, y, logits, loss = mlp()
        t = vktrain.Trainer(g, loss, batch=B, optimizer=vktrain.SGD(lr=0.2, momentum=0.9))
        seen = []
        t.fit(ds, x, y, 40, progress=lambda s, n, l: seen.append((s, n, l)))
        self.assertEqual([s for s, _, _ in seen], list(range(1, 41)))
        self.assertEqual(seen[0][1], 40)
        self.assertLess(np.mean([l for *_, l in seen[-8:]]), np.mean([l for *_, l in seen[:8]]))
        t.fit(ds, x, y, 10, progress=lambda s, n, l: s == 43)  # True stops (s counts on)
        self.assertEqual(t.step_count, 43)

        def boom(s, n, l):
            raise ValueError("from the callback at %d" % s)
        with self.assertRaises(ValueError) as cm:
            t.fit(ds, x, y, 10, progress=boom)
        self.assertIn("from the callback at 44", str(cm.exception))
        self.assertEqual(t.step_count, 44)

    def test_fit_ctrl_c(self):
        if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
            self.skipTest("SIGINT is ignored in this process (a background job)")
        rng = np.random.default_rng(4)
        X, Y = batch(rng, 64)
        g, x, y, logits, loss = mlp()
        t = vktrain.Trainer(g, loss, batch=B)

        def interrupt(s, n, l):
            if s == 5:
                os.kill(os.getpid(), signal.SIGINT)
        with self.assertRaises(KeyboardInterrupt):
            t.fit(vktrain.Dataset(X, Y, classes=C), x, y, 50, progress=interrupt)
        self.assertEqual(t.step_count, 5)
        self.assertNotEqual(signal.getsignal(signal.SIGINT), signal.SIG_IGN)

    def test_replicas_equal_one(self):
        rng = np.random.default_rng(5)
        steps = [batch(rng) for _ in range(4)]
        out = []
        for replicas in (1, 2):
            g, x, y, logits, loss = mlp()
            t = vktrain.Trainer(g, loss, batch=B, replicas=replicas,
                                optimizer=vktrain.SGD(lr=0.1, momentum=0.9))
            self.assertEqual(t.replicas, replicas)
            out.append(([t.step({x: X, y: Y}) for X, Y in steps], t.read_params()))
            if replicas == 2:
                np.testing.assert_array_equal(t.read_params(0), t.read_params(1))
                s = t.stats()  # sync: who averaged, and what the host read to do so
                self.assertIn(s["reducer"], ("host", "device"))
                self.assertEqual(s["average_host_bytes"] > 0, s["reducer"] == "host")
        np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-6)
        np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-5, atol=1e-6)

    def test_async(self):
        rng = np.random.default_rng(6)
        X = rng.standard_normal((256, F)).astype(np.float32)
        Y = (X[:, 0] > 0).astype(np.int64) * 2
        ds = vktrain.Dataset(X, Y, classes=C)
        g, x, y, logits, loss = mlp(batch=16)
        t = vktrain.Trainer(g, loss, batch=16, replicas=2, mode="async", staleness=2,
                            optimizer=vktrain.SGD(lr=0.1))
        before = t.evaluate(ds, x, logits)
        t.fit(ds, x, y, 60)
        after = t.evaluate(ds, x, logits)
        s = t.stats()
        self.assertEqual(s["replicas"], 2)
        self.assertGreater(s["updates"], 0)
        self.assertLessEqual(s["staleness_max"], (2 - 1) * (2 * 2 + 1))  # docs/async.md
        self.assertIsNone(s["reducer"])  # async: nothing is averaged (vkt_trainer_stats)
        self.assertLess(after.loss, before.loss)

    def test_pipeline_equals_one_model(self):
        rng = np.random.default_rng(7)
        steps = [batch(rng) for _ in range(3)]
        losses = []
        for staged in (False, True):
            g, x, y, logits, loss = mlp(stage_split=staged)
            kw = dict(stages=2, micro_batches=2, devices=[0, 0]) if staged else {}
            t = vktrain.Trainer(g, loss, batch=B, optimizer=vktrain.SGD(lr=0.1), **kw)
            losses.append([t.step({x: X, y: Y}) for X, Y in steps])
            if staged:
                self.assertGreater(t.stage_stats(0)["ops"], 0)
                self.assertGreater(t.stage_stats(1)["param_bytes"], 0)
                with self.assertRaises(vktrain.InvalidArgumentError):
                    t.stage_stats(5)
        np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vkt_python_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_checkpoints(self):
        rng = np.random.default_rng(8)
        g, x, y, logits, loss = mlp()
        t = vktrain.Trainer(g, loss, batch=B, optimizer=vktrain.Adam(lr=0.01))
        for _ in range(3):
            t.step(dict(zip((x, y), batch(rng))))
        saved = t.read_params()
        path = os.path.join(self.dir, "a.vkt")
        t.save(path)
        t.step(dict(zip((x, y), batch(rng))))
        self.assertFalse(np.array_equal(t.read_params(), saved))
        t.restore(path)
        np.testing.assert_array_equal(t.read_params(), saved)
        self.assertEqual(t.step_count, 3)
        ck = os.path.join(self.dir, "ck")
        self.assertEqual(t.save_dir(ck, keep=2), [])
        g2, *_, loss2 = mlp(seed=9)
        t2 = vktrain.Trainer(g2, loss2, batch=B, optimizer=vktrain.Adam(lr=0.01))
        self.assertEqual(t2.restore_latest(ck), 3)
        np.testing.assert_array_equal(t2.read_params(), saved)
        self.assertIsNone(t2.restore_latest(os.path.join(self.dir, "empty")))
        with open(os.path.join(self.dir, "bad.vkt"), "wb") as f:
            f.write(b"not a checkpoint")
        with self.assertRaises(vktrain.FormatError) as cm:
            t2.restore(os.path.join(self.dir, "bad.vkt"))
        self.assertIn("is corrupt: not a vktrain checkpoint", str(cm.exception))

    def test_safetensors_export_and_import(self):
        rng = np.random.default_rng(10)
        g, x, y, logits, loss = mlp()
        t = vktrain.Trainer(g, loss, batch=B)
        t.step(dict(zip((x, y), batch(rng))))
        ck, out = os.path.join(self.dir, "ck"), os.path.join(self.dir, "m.safetensors")
        t.save_dir(ck)
        self.assertEqual(vktrain.export_safetensors(ck, out), 1)
        g2, *_, loss2 = mlp(seed=11)
        t2 = vktrain.Trainer(g2, loss2, batch=B)
        r = t2.import_safetensors(out)
        self.assertEqual(r.loaded, 4)
        np.testing.assert_array_equal(t2.read_params(), t.read_params())

    def write_torch_style(self, path, tensors):
        """A safetensors file written here from NumPy (F32), independent of the library."""
        import json
        header, blobs, at = {}, [], 0
        for name, a in tensors.items():
            b = np.ascontiguousarray(a, dtype="<f4").tobytes()
            header[name] = {"dtype": "F32", "shape": list(a.shape),
                            "data_offsets": [at, at + len(b)]}
            blobs.append(b)
            at += len(b)
        h = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

    def test_import_with_a_map(self):
        rng = np.random.default_rng(12)
        w1, b1 = rng.standard_normal((5, F)), rng.standard_normal(5)  # [out, in] as PyTorch
        w2, b2 = rng.standard_normal((C, 5)), rng.standard_normal(C)
        path = os.path.join(self.dir, "torch.safetensors")
        self.write_torch_style(path, {"0.weight": w1, "0.bias": b1, "2.weight": w2,
                                      "2.bias": b2, "extra": np.zeros(2)})
        g, x, y, logits, loss = mlp()
        t = vktrain.Trainer(g, loss, batch=B)
        m = {"fc1.w": ("0.weight", "transpose"), "fc1.b": "0.bias",
             "fc2.w": ("2.weight", "transpose"), "fc2.b": "2.bias", None: ["extra"]}
        r = t.import_safetensors(path, m)
        self.assertEqual(tuple(r), (4, 2, 0, 1))
        p = t.params()
        np.testing.assert_array_equal(p["fc1.w"], w1.T.astype(np.float32))
        np.testing.assert_array_equal(p["fc2.b"], b2.astype(np.float32))
        X, _ = batch(rng)
        want = np.maximum(X @ w1.T + b1, 0) @ w2.T + b2
        np.testing.assert_allclose(t.predict({x: X}, logits), want, rtol=1e-4, atol=1e-4)
        # refusals: the library's message, nothing changed
        before = t.read_params()
        with self.assertRaises(vktrain.ShapeError) as cm:
            t.import_safetensors(path, {"fc1.w": "0.weight", None: "*"})
        self.assertIn("tensor '0.weight' is [5,6] (its transpose", str(cm.exception))
        with self.assertRaises(vktrain.FileError) as cm:
            t.import_safetensors(os.path.join(self.dir, "none.safetensors"))
        self.assertIn("no such file", str(cm.exception))
        with self.assertRaises(vktrain.InvalidArgumentError) as cm:
            t.import_safetensors(path, "fc1.w 0.weight sideways\n")
        self.assertIn("the name map, line 1", str(cm.exception))
        np.testing.assert_array_equal(t.read_params(), before)


class Lifetimes(unittest.TestCase):
    def test_close_order(self):
        g, x, y, logits, loss = linear_model()
        t = vktrain.Trainer(g, loss, batch=B)
        with self.assertRaises(vktrain.StateError):
            g.close()
        t.close()
        t.close()  # twice: nothing
        with self.assertRaises(vktrain.StateError) as cm:
            t.step({x: np.zeros((B, F)), y: np.zeros(B)})
        self.assertIn("closed", str(cm.exception))
        g.close()
        with vktrain.Graph() as g2:
            g2.input("x", (1, 1))
        self.assertTrue(g2.closed)


def tearDownModule():
    # under VKT_VALIDATION=1 (ctest python_vktrain.validation) any validation message fails
    n = vktrain.instance().validation_count()
    if n:
        raise AssertionError("%d validation-layer messages" % n)


if __name__ == "__main__":
    unittest.main()
