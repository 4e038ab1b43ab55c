"""Trainers (vkt_trainer): a graph compiled on one or more replicas (sync or async), or
on pipeline stages, with an optimizer; steps on NumPy batches, fit on data sets, predict,
evaluate, checkpoints and safetensors.

    t = vktrain.Trainer(g, loss, batch=128, optimizer=vktrain.SGD(lr=0.1, momentum=0.9))
    loss = t.step({x: xb, y: yb})                  # one step on a batch of NumPy arrays
    t.fit(train, x, y, steps=620, seed=1)          # or batches from a Dataset
    print(t.evaluate(test, x, logits).accuracy)
"""
import collections
import threading
from ctypes import (byref, c_char_p, c_float, c_int, c_uint32, c_uint64, c_void_p,
                    create_string_buffer)

import numpy as np

from ._handles import Handle
from ._lib import (PROGRESS_FN, EvalResult, Feed, ImportOptions, ImportReport,
                   OptimizerOptions, PipelineStageStats, TrainerOptions, TrainerStats, check,
                   error, lib, text)
from .devices import instance as default_instance

NOTES_SIZE = 16384
KINDS = {"sgd": 0, "adam": 1, "adamw": 2}
SCHEDULES = {"constant": 0, "step": 1, "cosine": 2, "warmup_cosine": 2}
MODES = {"sync": 0, "async": 1}
KERNELS = {"auto": 0, "cpu": 1, "gpu": 2}

EvalResult_ = collections.namedtuple("EvalResult", ["loss", "accuracy", "count"])
ImportReport_ = collections.namedtuple("ImportReport", ["loaded", "transposed", "kept",
                                                        "ignored"])


class Optimizer:
    """vkt_optimizer_options. kind "sgd" (momentum, nesterov), "adam" or "adamw"; schedule
    "constant", "step" (step_size, gamma) or "cosine" (warmup then cosine to min_lr over
    total_steps). Zero means the library's default where it has one (lr 0.01 for SGD, 0.001
    for Adam)."""

    def __init__(self, kind="sgd", lr=0.0, momentum=0.0, nesterov=False, beta1=0.0,
                 beta2=0.0, eps=0.0, weight_decay=0.0, clip_norm=0.0, schedule="constant",
                 step_size=0, gamma=0.0, warmup=0, total_steps=0, min_lr=0.0):
        if kind not in KINDS:
            raise error(1, "unknown optimizer %r (%s)" % (kind, ", ".join(KINDS)))
        if schedule not in SCHEDULES:
            raise error(1, "unknown schedule %r (%s)" % (schedule, ", ".join(SCHEDULES)))
        self.options = OptimizerOptions(
            kind=KINDS[kind], lr=lr, momentum=momentum, nesterov=int(bool(nesterov)),
            beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, clip_norm=clip_norm,
            schedule=SCHEDULES[schedule], step_size=step_size, gamma=gamma,
            warmup_steps=warmup, total_steps=total_steps, min_lr=min_lr)


def SGD(lr=0.01, momentum=0.0, **kw):
    return Optimizer("sgd", lr=lr, momentum=momentum, **kw)


def Adam(lr=0.001, **kw):
    return Optimizer("adam", lr=lr, **kw)


def AdamW(lr=0.001, weight_decay=0.01, **kw):
    return Optimizer("adamw", lr=lr, weight_decay=weight_decay, **kw)


def _map_text(m):
    """A name map as text (docs/import.md): a str as it is, or a dict {parameter: tensor,
    (tensor, "transpose"), or None (keeps its values)}, with the key None (or "-") listing
    the file's tensors to leave unused (["*"]: all that no parameter takes)."""
    if m is None or isinstance(m, str):
        return m
    lines = []
    for param, v in m.items():
        if param is None or param == "-":
            lines += ["- %s" % t for t in ([v] if isinstance(v, str) else v)]
        elif v is None:
            lines.append("%s -" % param)
        elif isinstance(v, str):
            lines.append("%s %s" % (param, v))
        else:
            lines.append("%s %s" % (param, " ".join(v)))
    return "\n".join(lines) + "\n"


class Trainer(Handle):
    """vkt_trainer. batch: the global batch (split over replicas, or over micro-batches);
    optimizer: an Optimizer (default SGD); replicas: data-parallel copies (the device list
    of VKT_DEVICES, else device 0, repeated; or `devices`, a list of device indices, one per
    replica, stage x copy: copy d's stage s on entry d * stages + s); mode "sync" or
    "async" (staleness: a bound, or None); stages, micro_batches: a pipeline (place the ops
    with graph.stage or graph.split_stages first). The graph and the instance stay alive
    (and cannot be closed) while the trainer is open."""
    KIND = "trainer"

    def __init__(self, graph, loss, batch, optimizer=None, replicas=None, devices=None,
                 mode="sync", staleness=None, stages=0, micro_batches=0, scale_lr=False,
                 scale_lr_warmup=0, balance_after=0, divergence_growth=0.0, check_ops=False,
                 kernels="auto", instance=None):
        inst = instance or default_instance()
        if mode not in MODES:
            raise error(1, "unknown mode %r (sync, async)" % (mode,))
        o = TrainerOptions(batch=batch, mode=MODES[mode], kernels=KERNELS[kernels],
                           check=int(bool(check_ops)), scale_lr=int(bool(scale_lr)),
                           scale_lr_warmup=scale_lr_warmup, balance_after=balance_after,
                           stages=stages, micro_batches=micro_batches,
                           divergence_growth=divergence_growth)
        if optimizer is not None:
            o.optimizer = optimizer.options
        if staleness is not None:
            o.bounded_staleness, o.staleness = 1, staleness
        if devices is None and replicas is not None:
            listed = inst.select_devices()
            per = max(stages, 1)
            devices = [listed[i % len(listed)] for i in range(replicas * per)]
        if devices is not None:
            self._devices = (c_uint32 * len(devices))(*devices)
            o.devices, o.device_count = self._devices, len(devices)
        h = c_void_p()
        check(lib.vkt_trainer_create(inst._handle(), graph._handle(), graph._in(loss),
                                     byref(o), byref(h)))
        super().__init__(h)
        self.graph, self.instance, self.batch = graph, inst, batch
        graph._users += 1
        inst._users += 1

    def _destroy(self, h):
        lib.vkt_trainer_destroy(h)

    def _released(self):
        self.graph._users -= 1
        self.instance._users -= 1

    def _check(self, status):
        check(status, lambda: text(lib.vkt_trainer_errmsg(self._h)))

    @property
    def errmsg(self):
        return text(lib.vkt_trainer_errmsg(self._handle()))

    @property
    def replicas(self):
        return lib.vkt_trainer_replicas(self._handle())

    @property
    def step_count(self):
        return lib.vkt_trainer_step_count(self._handle())

    @property
    def param_count(self):
        return lib.vkt_trainer_param_count(self._handle())

    # ---- feeding ----
    def _feeds(self, feeds, rows=None):
        """Feed structs for {tensor: array}; every array holds `rows` rows (default: as
        many as the first one holds) of its tensor, float32 (int32 for labels). The
        library trusts the sizes, so they are checked here. Returns (feeds, arrays, rows)."""
        if not feeds:
            raise error(1, "no feeds: a dict {input tensor: array} is needed")
        arr = (Feed * len(feeds))()
        keep = []
        for i, (t, a) in enumerate(feeds.items()):
            self.graph._in(t)
            a = np.ascontiguousarray(a, dtype=np.int32 if t.is_labels else np.float32)
            row = int(np.prod(t.shape[1:]))
            if rows is None:
                if a.size % row:
                    raise error(2, "feed %r: %d values are not whole rows of %s" %
                                (t.name, a.size, list(t.shape[1:])))
                rows = a.size // row
            if a.size != rows * row:
                raise error(2, "feed %r: %d values; %d rows of %s need %d" %
                            (t.name, a.size, rows, list(t.shape[1:]), rows * row))
            arr[i].tensor, arr[i].data = t._h, a.ctypes.data
            keep.append(a)
        return arr, keep, rows

    def step(self, feeds):
        """One training step on a global batch: {input: array} with `batch` rows each.
        Returns the batch's mean loss before the update."""
        arr, keep, _ = self._feeds(feeds, self.batch)
        loss = c_float()
        self._check(lib.vkt_trainer_step(self._handle(), arr, len(keep), byref(loss)))
        return loss.value

    def fit(self, dataset, input, labels, steps, seed=1, progress=None):
        """Trains `steps` global steps on batches of the data set (a seeded order, new each
        epoch; the position continues across calls). progress(step, total, loss), if
        given, is called after each step (sync) or each of replica 0's updates (async)
        from a training thread; returning True stops. Ctrl-C stops after the current step
        and raises KeyboardInterrupt; an exception in progress stops and is raised here."""
        raised = []
        main = threading.current_thread() is threading.main_thread()
        if main:
            check(lib.vkt_interrupt_install())

        def call(user, step, total, loss):
            try:
                if progress is not None and progress(step, total, loss):
                    return 1
                return 1 if main and lib.vkt_interrupted() else 0
            except BaseException as e:  # raised again by fit
                raised.append(e)
                return 1
        fn = PROGRESS_FN(call)
        try:
            st = lib.vkt_trainer_fit(self._handle(), dataset._handle(), self.graph._in(input),
                                     self.graph._in(labels), steps, seed,
                                     fn, None)
        finally:
            sig = lib.vkt_interrupted() if main else 0
            if main:
                lib.vkt_interrupt_uninstall()
        if raised:
            raise raised[0]
        self._check(st)
        if sig:
            raise KeyboardInterrupt("vktrain: interrupted after step %d" % self.step_count)

    def predict(self, feeds, output):
        """The output tensor ([rows, ...]) for any number of rows of the feeds, in
        evaluation mode (no dropout), as a float32 array."""
        arr, keep, rows = self._feeds(feeds)
        shape = (rows,) + tuple(output.shape[1:])
        out = np.empty(shape, np.float32)
        self._check(lib.vkt_trainer_predict(self._handle(), arr, len(keep), rows,
                                            self.graph._in(output), out.ctypes.data))
        return out

    def evaluate(self, dataset, input, logits):
        """Mean cross-entropy and accuracy of the logits [B, C] over the data set."""
        r = EvalResult()
        self._check(lib.vkt_trainer_evaluate(self._handle(), dataset._handle(),
                                             self.graph._in(input), self.graph._in(logits),
                                             byref(r)))
        return EvalResult_(r.loss, r.accuracy, r.count)

    def set_optimizer(self, optimizer):
        """New hyperparameters (same kind) from the next step on."""
        self._check(lib.vkt_trainer_set_optimizer(self._handle(), byref(optimizer.options)))

    # ---- parameters ----
    def read(self, param):
        """One parameter's values, in its shape."""
        out = np.empty(param.shape, np.float32)
        self._check(lib.vkt_trainer_read(self._handle(), self.graph._in(param),
                                         out.ctypes.data, out.size))
        return out

    def params(self):
        """{name: array} of every parameter and state of the graph."""
        return {t.name: self.read(t) for t in self.graph._params}

    def read_params(self, replica=0):
        """The flat parameter array (the layout of vkt_model_param_offset)."""
        out = np.empty(self.param_count, np.float32)
        self._check(lib.vkt_trainer_read_replica_params(self._handle(), replica,
                                                        out.ctypes.data, out.size))
        return out

    def write_params(self, flat):
        flat = np.ascontiguousarray(flat, dtype=np.float32).ravel()
        if flat.size != self.param_count:
            raise error(2, "%d values; the trainer has %d parameters" %
                        (flat.size, self.param_count))
        self._check(lib.vkt_trainer_write_params(self._handle(), flat.ctypes.data, flat.size))

    # ---- checkpoints and safetensors ----
    def save(self, path):
        """A checkpoint file (docs/checkpoint.md), written atomically."""
        self._check(lib.vkt_trainer_save(self._handle(), path.encode()))

    def restore(self, path):
        self._check(lib.vkt_trainer_restore(self._handle(), path.encode()))

    def save_dir(self, folder, keep=3):
        """folder/ckpt-<step>.vkt, keeping the newest `keep`; returns the notes (corrupt
        files moved aside) as a list of lines."""
        notes = create_string_buffer(NOTES_SIZE)
        self._check(lib.vkt_checkpoint_save_dir_v2(self._handle(), folder.encode(), keep,
                                                   notes, NOTES_SIZE))
        return [l for l in text(notes.value).split("\n") if l]

    def restore_latest(self, folder):
        """Restores the newest valid checkpoint of the folder: its step, or None if there is
        none."""
        found, step = c_int(), c_uint64()
        notes = create_string_buffer(NOTES_SIZE)
        self._check(lib.vkt_checkpoint_restore_latest(self._handle(), folder.encode(),
                                                      byref(found), byref(step), notes,
                                                      NOTES_SIZE))
        return step.value if found.value else None

    def check_divergence(self):
        self._check(lib.vkt_trainer_check_divergence(self._handle()))

    def import_safetensors(self, path, map=None):
        """Parameters from a safetensors file (docs/import.md), by name or through `map`:
        the map's text, or a dict {parameter: tensor | (tensor, "transpose") | None (keep
        its values)} with the key None listing tensors to leave unused (["*"]: all the
        others). Returns ImportReport(loaded, transposed, kept, ignored)."""
        t = _map_text(map)
        o = ImportOptions(map=c_char_p(t.encode()) if t is not None else None)
        r = ImportReport()
        self._check(lib.vkt_trainer_import_safetensors(self._handle(), path.encode(), byref(o),
                                                       byref(r)))
        return ImportReport_(r.loaded, r.transposed, r.kept, r.ignored)

    # ---- statistics ----
    def stats(self):
        """vkt_trainer_stats as a dict (the replicas' as a list of dicts)."""
        s = TrainerStats()
        self._check(lib.vkt_trainer_stats_get(self._handle(), byref(s)))
        d = {k: getattr(s, k) for k, _ in TrainerStats._fields_ if k != "replica"}
        for k in ("reducer", "exchange"):
            d[k] = d[k].decode() if d[k] is not None else None
        d["replica"] = [{k: getattr(r, k) for k, _ in r._fields_}
                        for r in s.replica[:s.replicas]]
        return d

    def stage_stats(self, stage):
        s = PipelineStageStats()
        self._check(lib.vkt_trainer_stage_stats_get(self._handle(), stage, byref(s)))
        return {k: getattr(s, k) for k, _ in PipelineStageStats._fields_}


def export_safetensors(checkpoint_dir, path):
    """The newest valid checkpoint of the folder as a safetensors file; returns its step."""
    step = c_uint64()
    notes = create_string_buffer(NOTES_SIZE)
    check(lib.vkt_checkpoint_export_safetensors_v2(checkpoint_dir.encode(), path.encode(),
                                                   byref(step), notes, NOTES_SIZE))
    return step.value
