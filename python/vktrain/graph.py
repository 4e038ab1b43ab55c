"""Graphs and tensors: a static dataflow graph built op by op (vkt_graph), compiled by a
Trainer. Every op checks shapes as it is built; the first error raises at once with the
library's message (ShapeError: "vkt_matmul: inner dimensions differ: a [8,3] and b [4,2]").

    g = vktrain.Graph(seed=1)
    x = g.input("x", (128, 784))
    y = g.labels("y", 128)
    h = g.relu(g.dense(x, 256, "fc1"))
    logits = g.dense(h, 10, "fc2", init="glorot")
    loss = g.softmax_cross_entropy(logits, y)
"""
import ctypes
from ctypes import byref, c_uint32, c_void_p

from ._handles import Handle
from ._lib import (MAX_DIMS, Conv2dOptions, GraphOptions, Init, Shape, SplitOptions,
                   SplitReport, check, error, lib, text)

INIT_KINDS = {"zeros": 0, "constant": 1, "uniform": 2, "normal": 3, "glorot": 4, "xavier": 4,
              "he": 5, "kaiming": 5}
SPLIT_COSTS = {"auto": 0, "time": 1, "params": 2}


def _shape(dims, what="shape"):
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(dims) > MAX_DIMS or any(int(d) < 0 or int(d) >= 2 ** 32 for d in dims):
        raise error(1, "%s %s: 0 to %d dimensions of 0 to 2^32 - 1 each" %
                    (what, list(dims), MAX_DIMS))
    s = Shape(ndim=len(dims))
    for i, d in enumerate(dims):
        s.dims[i] = int(d)
    return s


def _init(spec):
    """An initializer: None (zeros), a name ("he", "glorot", "zeros"), a tuple (kind, a[, b
    [, seed]]) such as ("normal", 0, 0.02) or ("uniform", -0.1, 0.1) or ("constant", 1), or a
    dict(kind=..., a=..., b=..., seed=...)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = (spec,)
    if isinstance(spec, dict):
        spec = (spec.get("kind", "zeros"), spec.get("a", 0.0), spec.get("b", 0.0),
                spec.get("seed", 0))
    kind = spec[0]
    if kind not in INIT_KINDS:
        raise error(1, "unknown initializer %r (%s)" % (kind, ", ".join(INIT_KINDS)))
    a = float(spec[1]) if len(spec) > 1 else 0.0
    b = float(spec[2]) if len(spec) > 2 else 0.0
    seed = int(spec[3]) if len(spec) > 3 else 0
    return Init(kind=INIT_KINDS[kind], a=a, b=b, seed=seed)


class Tensor:
    """A tensor of a graph (vkt_tensor *), owned by the graph. Supports +, -, * (broadcasting)
    and @ (matmul) with tensors of the same graph."""
    __slots__ = ("graph", "_h")

    def __init__(self, graph, h):
        self.graph = graph
        self._h = h

    @property
    def name(self):
        return text(lib.vkt_tensor_name(self._h))

    @property
    def shape(self):
        s = lib.vkt_tensor_shape(self._h)
        return tuple(s.dims[:s.ndim])

    @property
    def stage(self):
        return lib.vkt_tensor_stage(self._h)

    def set_stage(self, stage):
        """Moves this op to a pipeline stage (vkt_tensor_set_stage)."""
        check(lib.vkt_tensor_set_stage(self._h, stage))

    @property
    def is_labels(self):
        """Whether it holds int32 labels (vkt_input_labels)."""
        return self._h in self.graph._labels

    def __eq__(self, other):
        return isinstance(other, Tensor) and other._h == self._h

    def __hash__(self):
        return hash(self._h)

    def __repr__(self):
        return "<vktrain.Tensor %r %s>" % (self.name, list(self.shape))

    def __add__(self, o):
        return self.graph.add(self, o)

    def __sub__(self, o):
        return self.graph.sub(self, o)

    def __mul__(self, o):
        return self.graph.scale(self, o) if isinstance(o, (int, float)) else self.graph.mul(self, o)

    __rmul__ = __mul__

    def __matmul__(self, o):
        return self.graph.matmul(self, o)


class Graph(Handle):
    """vkt_graph. seed: parameter initializers and dropout (0: a fixed default)."""
    KIND = "graph"

    def __init__(self, seed=0):
        h = c_void_p()
        check(lib.vkt_graph_create(byref(GraphOptions(seed=seed)), byref(h)))
        super().__init__(h)
        self._labels = set()   # handles of label inputs (fed as int32)
        self._params = []      # parameters and states, in the order made

    def _destroy(self, h):
        lib.vkt_graph_destroy(h)

    @property
    def status(self):
        return lib.vkt_graph_status(self._handle())

    @property
    def errmsg(self):
        return text(lib.vkt_graph_errmsg(self._handle()))

    def _t(self, h):
        """A new tensor, or the graph's (sticky) error raised."""
        if not h:
            st = lib.vkt_graph_status(self._h)
            raise error(st or 1, text(lib.vkt_graph_errmsg(self._h)) or "the op failed")
        return Tensor(self, h)

    def _in(self, t):
        if t is None:
            return None
        if not isinstance(t, Tensor) or t.graph is not self:
            raise error(1, "%r is not a tensor of this graph" % (t,))
        return t._h

    # ---- leaves ----
    def input(self, name, shape):
        """fp32 data fed every step; shape[0] is the batch."""
        return self._t(lib.vkt_input(self._handle(), name.encode(), byref(_shape(shape))))

    def labels(self, name, shape):
        """int32 class labels: [B] (an int) or any shape whose first dimension is the batch."""
        if isinstance(shape, int):
            t = self._t(lib.vkt_input_labels(self._handle(), name.encode(), shape))
        else:
            t = self._t(lib.vkt_input_labels_shape(self._handle(), name.encode(),
                                                   byref(_shape(shape))))
        self._labels.add(t._h)
        return t

    def param(self, name, shape, init=None):
        """A trainable parameter (no batch dimension); init: see _init (None: zeros)."""
        i = _init(init)
        t = self._t(lib.vkt_param(self._handle(), name.encode(), byref(_shape(shape)),
                                  byref(i) if i is not None else None))
        self._params.append(t)
        return t

    def state(self, name, shape, init=None):
        """A parameter the optimizer does not train (batch norm's running averages)."""
        i = _init(init)
        t = self._t(lib.vkt_state(self._handle(), name.encode(), byref(_shape(shape)),
                                  byref(i) if i is not None else None))
        self._params.append(t)
        return t

    # ---- ops ----
    def matmul(self, a, b):
        return self._t(lib.vkt_matmul(self._handle(), self._in(a), self._in(b)))

    def linear(self, x, w, b=None):
        """x [..., in] w [in, out] (+ b [out])."""
        return self._t(lib.vkt_linear(self._handle(), self._in(x), self._in(w), self._in(b)))

    def dense(self, x, units, name, init="he", bias=True):
        """A fully connected layer: parameters <name>.w [in, units] (init) and <name>.b
        [units] (zeros), then linear."""
        w = self.param(name + ".w", (x.shape[-1], units), init)
        b = self.param(name + ".b", (units,)) if bias else None
        return self.linear(x, w, b)

    def add(self, a, b):
        return self._t(lib.vkt_add(self._handle(), self._in(a), self._in(b)))

    def sub(self, a, b):
        return self._t(lib.vkt_sub(self._handle(), self._in(a), self._in(b)))

    def mul(self, a, b):
        return self._t(lib.vkt_mul(self._handle(), self._in(a), self._in(b)))

    def scale(self, x, s):
        return self._t(lib.vkt_scale(self._handle(), self._in(x), float(s)))

    def relu(self, x):
        return self._t(lib.vkt_relu(self._handle(), self._in(x)))

    def leaky_relu(self, x, alpha=0.01):
        return self._t(lib.vkt_leaky_relu(self._handle(), self._in(x), float(alpha)))

    def gelu(self, x):
        return self._t(lib.vkt_gelu(self._handle(), self._in(x)))

    def tanh(self, x):
        return self._t(lib.vkt_tanh(self._handle(), self._in(x)))

    def sigmoid(self, x):
        return self._t(lib.vkt_sigmoid(self._handle(), self._in(x)))

    def silu(self, x):
        return self._t(lib.vkt_silu(self._handle(), self._in(x)))

    def softmax(self, x):
        return self._t(lib.vkt_softmax(self._handle(), self._in(x)))

    def log_softmax(self, x):
        return self._t(lib.vkt_log_softmax(self._handle(), self._in(x)))

    def softmax_cross_entropy(self, logits, labels):
        return self._t(lib.vkt_softmax_cross_entropy(self._handle(), self._in(logits),
                                                     self._in(labels)))

    def mse(self, pred, target):
        return self._t(lib.vkt_mse(self._handle(), self._in(pred), self._in(target)))

    def sum(self, x, axis=-1):
        """axis < 0: over every element (a scalar)."""
        return self._t(lib.vkt_sum(self._handle(), self._in(x), axis))

    def mean(self, x, axis=-1):
        return self._t(lib.vkt_mean(self._handle(), self._in(x), axis))

    def reshape(self, x, shape):
        """One dimension may be 0: inferred (use 0 for the batch)."""
        return self._t(lib.vkt_reshape(self._handle(), self._in(x), byref(_shape(shape))))

    def transpose(self, x):
        return self._t(lib.vkt_transpose(self._handle(), self._in(x)))

    def concat(self, tensors, axis):
        arr = (c_void_p * len(tensors))(*[self._in(t) for t in tensors])
        return self._t(lib.vkt_concat(self._handle(), arr, len(tensors), axis))

    def split(self, x, axis, sizes):
        """The parts of x along axis, as a list."""
        n = len(sizes)
        outs = (c_void_p * n)()
        self._t(lib.vkt_split(self._handle(), self._in(x), axis, (c_uint32 * n)(*sizes), n,
                              outs))
        return [Tensor(self, h) for h in outs]

    def dropout(self, x, p):
        return self._t(lib.vkt_dropout(self._handle(), self._in(x), float(p)))

    # ---- layers ----
    def conv2d(self, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
        """x [N,C,H,W], w [OC, C/groups, KH, KW]; stride, padding, dilation: an int or
        (h, w)."""
        def pair(v):
            return (v, v) if isinstance(v, int) else tuple(v)
        o = Conv2dOptions()
        o.stride_h, o.stride_w = pair(stride)
        o.pad_h, o.pad_w = pair(padding)
        o.dilation_h, o.dilation_w = pair(dilation)
        o.groups = groups
        return self._t(lib.vkt_conv2d(self._handle(), self._in(x), self._in(w), self._in(b),
                                      byref(o)))

    def max_pool2d(self, x, kernel, stride=None, padding=0):
        return self._t(lib.vkt_max_pool2d(self._handle(), self._in(x), kernel,
                                          stride or kernel, padding))

    def avg_pool2d(self, x, kernel, stride=None, padding=0):
        return self._t(lib.vkt_avg_pool2d(self._handle(), self._in(x), kernel,
                                          stride or kernel, padding))

    def global_avg_pool(self, x):
        return self._t(lib.vkt_global_avg_pool(self._handle(), self._in(x)))

    def layer_norm(self, x, gamma, beta, eps=0.0):
        """eps 0: 1e-5."""
        return self._t(lib.vkt_layer_norm(self._handle(), self._in(x), self._in(gamma),
                                          self._in(beta), float(eps)))

    def rms_norm(self, x, gamma, eps=0.0):
        return self._t(lib.vkt_rms_norm(self._handle(), self._in(x), self._in(gamma),
                                        float(eps)))

    def batch_norm(self, x, gamma, beta, running_mean, running_var, eps=0.0, momentum=0.0):
        return self._t(lib.vkt_batch_norm(self._handle(), self._in(x), self._in(gamma),
                                          self._in(beta), self._in(running_mean),
                                          self._in(running_var), float(eps), float(momentum)))

    def embedding(self, ids, table):
        """ids: a float input of exact integer ids; table [vocab, dim]."""
        return self._t(lib.vkt_embedding(self._handle(), self._in(ids), self._in(table)))

    def causal_attention(self, qkv, heads, dropout=0.0):
        """qkv [B,T,3C] (q, k, v side by side) -> [B,T,C]."""
        return self._t(lib.vkt_causal_attention(self._handle(), self._in(qkv), heads,
                                                float(dropout)))

    # ---- names, kept tensors, placement ----
    def find(self, name):
        """The first tensor of that name, or None."""
        h = lib.vkt_graph_find(self._handle(), name.encode())
        return Tensor(self, h) if h else None

    def set_name(self, t, name):
        return self._t(lib.vkt_set_name(self._handle(), self._in(t), name.encode()))

    def keep(self, t):
        """Keeps t readable after a step (the memory plan does not reuse it)."""
        return self._t(lib.vkt_keep(self._handle(), self._in(t)))

    @property
    def stage(self):
        """The pipeline stage new tensors are placed on (vkt_graph_set_stage)."""
        return lib.vkt_graph_stage(self._handle())

    @stage.setter
    def stage(self, s):
        check(lib.vkt_graph_set_stage(self._handle(), s))

    def split_stages(self, loss, stages, cost="params", batch=0, tolerance=0.0):
        """Places the ops the loss depends on on `stages` pipeline stages (vkt_graph_split),
        balancing parameter bytes ("params"; "time" and "auto" need a device and are left
        to vkt train). Returns the report as a dict."""
        o = SplitOptions(stages=stages, cost=SPLIT_COSTS[cost], batch=batch,
                         tolerance=tolerance)
        r = SplitReport()
        check(lib.vkt_graph_split(self._handle(), self._in(loss), byref(o), byref(r)))
        return {"stages": r.stages, "imbalance": r.imbalance, "note": text(r.note),
                "stage": [{"ops": s.ops, "first": text(s.first), "last": text(s.last),
                           "cost": s.cost, "param_bytes": s.param_bytes,
                           "send_bytes": s.send_bytes} for s in r.stage[:r.stages]]}
