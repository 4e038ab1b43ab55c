"""The shared library through ctypes: finding it, the C structs of include/vkt.h mirrored
field by field, the functions' prototypes, and statuses turned into exceptions.

The structs below must match vkt.h byte for byte: tests/python/test_abi.py compares every
field's offset and size and every struct's size with what the C compiler gives
(tests/python/abi_layout.c), so a change to vkt.h that is not made here fails a test
instead of corrupting memory.

The library: $VKTRAIN_LIBRARY if set (the build tree's, in the tests), else the one
installed beside this package (_install.py, written by cmake --install), else the
system's libvktrain.so.<version> (ldconfig's search path)."""
import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_size_t, c_uint32, c_uint64, c_void_p)

MAX_DIMS = 4
MAX_HEAPS = 16
DEVICE_NAME_SIZE = 256
MAX_REPLICAS = 64
MAX_STAGES = 16
NAME_SIZE = 64

STATUS_NAMES = [
    "VKT_OK", "VKT_ERROR_INVALID_ARGUMENT", "VKT_ERROR_SHAPE", "VKT_ERROR_NO_VULKAN",
    "VKT_ERROR_NO_DEVICE", "VKT_ERROR_OUT_OF_MEMORY", "VKT_ERROR_LIMIT", "VKT_ERROR_VULKAN",
    "VKT_ERROR_DEVICE_LOST", "VKT_ERROR_STATE", "VKT_ERROR_IO", "VKT_ERROR_FORMAT",
    "VKT_ERROR_INTERNAL", "VKT_ERROR_TIMEOUT", "VKT_ERROR_REMOTE", "VKT_ERROR_DIVERGED",
]


class Error(Exception):
    """A vktrain call failed: `status` is the vkt_status (an int), `status_name` its name
    ("VKT_ERROR_SHAPE"), and the message is the library's."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = (STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES)
                            else "vkt_status %d" % status)
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


# One subclass per status, also deriving from the Python exception it resembles, so
# `except ValueError` catches a shape error and `except OSError` an unreadable file.
class InvalidArgumentError(Error, ValueError): pass
class ShapeError(Error, ValueError): pass
class NoVulkanError(Error, RuntimeError): pass
class NoDeviceError(Error, RuntimeError): pass
class OutOfMemoryError(Error, MemoryError): pass
class LimitError(Error, RuntimeError): pass
class VulkanError(Error, RuntimeError): pass
class DeviceLostError(Error, RuntimeError): pass
class StateError(Error, RuntimeError): pass
class FileError(Error, OSError): pass
class FormatError(Error, ValueError): pass
class InternalError(Error, RuntimeError): pass
class RankTimeoutError(Error, TimeoutError): pass
class RemoteError(Error, RuntimeError): pass
class DivergedError(Error, ArithmeticError): pass

_BY_STATUS = [None, InvalidArgumentError, ShapeError, NoVulkanError, NoDeviceError,
              OutOfMemoryError, LimitError, VulkanError, DeviceLostError, StateError, FileError,
              FormatError, InternalError, RankTimeoutError, RemoteError, DivergedError]


def error(status, message):
    """The exception for a status and message."""
    cls = _BY_STATUS[status] if 0 < status < len(_BY_STATUS) else Error
    return cls(status, message)


# ---- the structs of vkt.h ----------------------------------------------------------------

class Shape(Structure):
    _fields_ = [("ndim", c_uint32), ("dims", c_uint32 * MAX_DIMS)]


class InstanceOptions(Structure):
    _fields_ = [("enable_validation", c_int), ("loader_path", c_char_p),
                ("quiet_validation", c_int)]


class DeviceInfo(Structure):
    _fields_ = [("name", c_char * DEVICE_NAME_SIZE), ("driver_name", c_char * DEVICE_NAME_SIZE),
                ("driver_info", c_char * DEVICE_NAME_SIZE), ("vendor_id", c_uint32),
                ("device_id", c_uint32), ("type", c_int), ("api_version", c_uint32),
                ("heap_count", c_uint32), ("heap_size", c_uint64 * MAX_HEAPS),
                ("heap_device_local", c_int * MAX_HEAPS), ("subgroup_size", c_uint32),
                ("max_storage_buffer_range", c_uint64), ("max_shared_memory", c_uint32),
                ("max_workgroup_invocations", c_uint32), ("max_allocation_size", c_uint64),
                ("compute_only_queue", c_int), ("timestamps", c_int),
                ("compute_queues", c_uint32), ("timeline_semaphores", c_int),
                ("host_import", c_int), ("group", c_uint32), ("group_size", c_uint32)]


class GraphOptions(Structure):
    _fields_ = [("seed", c_uint64)]


class Init(Structure):
    _fields_ = [("kind", c_int), ("a", c_float), ("b", c_float), ("seed", c_uint64)]


class Conv2dOptions(Structure):
    _fields_ = [("stride_h", c_uint32), ("stride_w", c_uint32), ("pad_h", c_uint32),
                ("pad_w", c_uint32), ("dilation_h", c_uint32), ("dilation_w", c_uint32),
                ("groups", c_uint32)]


class OptimizerOptions(Structure):
    _fields_ = [("kind", c_int), ("lr", c_float), ("momentum", c_float), ("nesterov", c_int),
                ("beta1", c_float), ("beta2", c_float), ("eps", c_float),
                ("weight_decay", c_float), ("clip_norm", c_float), ("grad_scale", c_float),
                ("schedule", c_int), ("step_size", c_uint64), ("gamma", c_float),
                ("warmup_steps", c_uint64), ("total_steps", c_uint64), ("min_lr", c_float)]


class TrainerOptions(Structure):
    _fields_ = [("batch", c_uint32), ("optimizer", OptimizerOptions),
                ("devices", POINTER(c_uint32)), ("device_count", c_uint32), ("mode", c_int),
                ("kernels", c_int), ("check", c_int), ("bounded_staleness", c_int),
                ("staleness", c_uint32), ("scale_lr", c_int), ("scale_lr_warmup", c_uint32),
                ("balance_after", c_uint32), ("slow_replica", c_uint32),
                ("slow_seconds", c_double), ("world", c_void_p), ("bucket_bytes", c_uint32),
                ("overlap", c_int), ("check_identical", c_uint32), ("stages", c_uint32),
                ("micro_batches", c_uint32), ("divergence_growth", c_float),
                ("precision", c_int), ("loss_scale", c_float),
                ("loss_scale_interval", c_uint32), ("nonfinite_skips", c_uint32),
                ("recompute", c_int)]


class Feed(Structure):
    _fields_ = [("tensor", c_void_p), ("data", c_void_p)]


class EvalResult(Structure):
    _fields_ = [("loss", c_float), ("accuracy", c_float), ("count", c_uint32)]


class ReplicaStats(Structure):
    _fields_ = [("step_seconds", c_double), ("wait_seconds", c_double),
                ("data_wait_seconds", c_double), ("steps", c_uint64), ("rows", c_uint32)]


class TrainerStats(Structure):
    _fields_ = [("steps", c_uint64), ("step_seconds", c_double), ("host_cpu_seconds", c_double),
                ("step_dispatches", c_uint32), ("activation_bytes", c_uint64),
                ("activation_no_reuse_bytes", c_uint64), ("replicas", c_uint32),
                ("average_seconds", c_double), ("bytes_staged_per_step", c_uint64),
                ("staleness_mean", c_double), ("staleness_p99", c_uint64),
                ("staleness_max", c_uint64), ("updates", c_uint64),
                ("data_wait_seconds", c_double), ("replica", ReplicaStats * MAX_REPLICAS),
                ("rank", c_uint32), ("ranks", c_uint32), ("world_replicas", c_uint32),
                ("comm_seconds", c_double), ("comm_exposed_seconds", c_double),
                ("comm_bytes", c_uint64), ("holders", c_uint32), ("submits", c_uint64),
                ("fence_waits", c_uint64), ("sync_transfers", c_uint64),
                ("exposed_seconds", c_double), ("average_threads", c_uint32),
                ("stage_cached", c_int32), ("reducer", c_char_p),
                ("average_host_bytes", c_uint64), ("exchange", c_char_p),
                ("exchange_host_bytes", c_uint64)]


class PipelineStageStats(Structure):
    _fields_ = [("device", c_uint32), ("ops", c_uint32), ("param_bytes", c_uint64),
                ("grad_bytes", c_uint64), ("optimizer_bytes", c_uint64),
                ("activation_bytes", c_uint64), ("sent_bytes", c_uint64),
                ("busy_seconds", c_double), ("device_bytes", c_uint64),
                ("grad_reads", c_uint64), ("grad_writes", c_uint64),
                ("staleness_mean", c_double), ("staleness_p99", c_uint64),
                ("staleness_max", c_uint64), ("updates", c_uint64),
                ("forwards", c_uint64), ("kept", c_uint32),
                ("sent_host_bytes", c_uint64), ("overlapped", c_uint64)]


class SplitOptions(Structure):
    _fields_ = [("stages", c_uint32), ("cost", c_int), ("context", c_void_p),
                ("batch", c_uint32), ("runs", c_uint32), ("tolerance", c_double),
                ("recompute", c_int)]


class SplitStage(Structure):
    _fields_ = [("ops", c_uint32), ("first", c_char * NAME_SIZE), ("last", c_char * NAME_SIZE),
                ("cost", c_double), ("param_bytes", c_uint64), ("send_bytes", c_uint64)]


class SplitReport(Structure):
    _fields_ = [("stages", c_uint32), ("cost", c_int), ("note", c_char * 256),
                ("imbalance", c_double), ("stage", SplitStage * MAX_STAGES)]


class ImportOptions(Structure):
    _fields_ = [("map", c_char_p)]


class ImportReport(Structure):
    _fields_ = [("loaded", c_uint32), ("transposed", c_uint32), ("kept", c_uint32),
                ("ignored", c_uint32)]


# The structs by their C names (tests/python/test_abi.py).
STRUCTS = {
    "vkt_shape": Shape, "vkt_instance_options": InstanceOptions,
    "vkt_device_info": DeviceInfo, "vkt_graph_options": GraphOptions, "vkt_init": Init,
    "vkt_conv2d_options": Conv2dOptions, "vkt_optimizer_options": OptimizerOptions,
    "vkt_trainer_options": TrainerOptions, "vkt_feed": Feed, "vkt_eval_result": EvalResult,
    "vkt_replica_stats": ReplicaStats, "vkt_trainer_stats": TrainerStats,
    "vkt_pipeline_stage_stats": PipelineStageStats, "vkt_split_options": SplitOptions,
    "vkt_split_stage": SplitStage, "vkt_split_report": SplitReport,
    "vkt_import_options": ImportOptions, "vkt_import_report": ImportReport,
}

# ---- the functions -------------------------------------------------------------------------

P = c_void_p   # every handle (vkt_instance *, vkt_graph *, vkt_tensor *, ...)
PP = POINTER(c_void_p)
S = c_int      # vkt_status
T = P          # a tensor

# name: (restype, argtypes)
PROTOTYPES = {
    "vkt_status_name": (c_char_p, [c_int]),
    "vkt_last_error": (c_char_p, []),
    "vkt_instance_create": (S, [POINTER(InstanceOptions), PP]),
    "vkt_instance_destroy": (None, [P]),
    "vkt_instance_errmsg": (c_char_p, [P]),
    "vkt_instance_device_count": (c_uint32, [P]),
    "vkt_instance_device_info": (S, [P, c_uint32, POINTER(DeviceInfo)]),
    "vkt_device_type_name": (c_char_p, [c_int]),
    "vkt_instance_validation_count": (c_uint64, [P]),
    "vkt_instance_select_devices": (S, [P, POINTER(c_uint32), c_uint32, POINTER(c_uint32)]),
    "vkt_graph_create": (S, [POINTER(GraphOptions), PP]),
    "vkt_graph_destroy": (None, [P]),
    "vkt_graph_status": (S, [P]),
    "vkt_graph_errmsg": (c_char_p, [P]),
    "vkt_tensor_shape": (Shape, [T]),
    "vkt_tensor_name": (c_char_p, [T]),
    "vkt_set_name": (T, [P, T, c_char_p]),
    "vkt_graph_find": (T, [P, c_char_p]),
    "vkt_keep": (T, [P, T]),
    "vkt_graph_set_stage": (S, [P, c_uint32]),
    "vkt_graph_stage": (c_uint32, [P]),
    "vkt_tensor_set_stage": (S, [T, c_uint32]),
    "vkt_tensor_stage": (c_uint32, [T]),
    "vkt_graph_split": (S, [P, T, POINTER(SplitOptions), POINTER(SplitReport)]),
    "vkt_input": (T, [P, c_char_p, POINTER(Shape)]),
    "vkt_input_labels": (T, [P, c_char_p, c_uint32]),
    "vkt_input_labels_shape": (T, [P, c_char_p, POINTER(Shape)]),
    "vkt_param": (T, [P, c_char_p, POINTER(Shape), POINTER(Init)]),
    "vkt_state": (T, [P, c_char_p, POINTER(Shape), POINTER(Init)]),
    "vkt_matmul": (T, [P, T, T]),
    "vkt_linear": (T, [P, T, T, T]),
    "vkt_add": (T, [P, T, T]),
    "vkt_sub": (T, [P, T, T]),
    "vkt_mul": (T, [P, T, T]),
    "vkt_scale": (T, [P, T, c_float]),
    "vkt_relu": (T, [P, T]),
    "vkt_leaky_relu": (T, [P, T, c_float]),
    "vkt_gelu": (T, [P, T]),
    "vkt_tanh": (T, [P, T]),
    "vkt_sigmoid": (T, [P, T]),
    "vkt_silu": (T, [P, T]),
    "vkt_softmax": (T, [P, T]),
    "vkt_log_softmax": (T, [P, T]),
    "vkt_softmax_cross_entropy": (T, [P, T, T]),
    "vkt_mse": (T, [P, T, T]),
    "vkt_sum": (T, [P, T, c_int]),
    "vkt_mean": (T, [P, T, c_int]),
    "vkt_reshape": (T, [P, T, POINTER(Shape)]),
    "vkt_transpose": (T, [P, T]),
    "vkt_concat": (T, [P, POINTER(c_void_p), c_uint32, c_uint32]),
    "vkt_split": (T, [P, T, c_uint32, POINTER(c_uint32), c_uint32, POINTER(c_void_p)]),
    "vkt_dropout": (T, [P, T, c_float]),
    "vkt_conv2d": (T, [P, T, T, T, POINTER(Conv2dOptions)]),
    "vkt_max_pool2d": (T, [P, T, c_uint32, c_uint32, c_uint32]),
    "vkt_avg_pool2d": (T, [P, T, c_uint32, c_uint32, c_uint32]),
    "vkt_global_avg_pool": (T, [P, T]),
    "vkt_layer_norm": (T, [P, T, T, T, c_float]),
    "vkt_rms_norm": (T, [P, T, T, c_float]),
    "vkt_batch_norm": (T, [P, T, T, T, T, T, c_float, c_float]),
    "vkt_embedding": (T, [P, T, T]),
    "vkt_causal_attention": (T, [P, T, c_uint32, c_float]),
    "vkt_dataset_create": (S, [c_uint32, c_uint32, c_uint32, c_void_p, c_void_p, PP]),
    "vkt_dataset_load_mnist": (S, [c_char_p, PP, PP]),
    "vkt_dataset_load_csv": (S, [c_char_p, c_char_p, PP]),
    "vkt_dataset_destroy": (None, [P]),
    "vkt_dataset_count": (c_uint32, [P]),
    "vkt_dataset_features": (c_uint32, [P]),
    "vkt_dataset_classes": (c_uint32, [P]),
    "vkt_dataset_x": (POINTER(c_float), [P]),
    "vkt_dataset_y": (POINTER(c_int32), [P]),
    "vkt_trainer_create": (S, [P, P, T, POINTER(TrainerOptions), PP]),
    "vkt_trainer_destroy": (None, [P]),
    "vkt_trainer_errmsg": (c_char_p, [P]),
    "vkt_trainer_replicas": (c_uint32, [P]),
    "vkt_trainer_step": (S, [P, POINTER(Feed), c_uint32, POINTER(c_float)]),
    "vkt_trainer_step_count": (c_uint64, [P]),
    "vkt_trainer_set_optimizer": (S, [P, POINTER(OptimizerOptions)]),
    "vkt_trainer_fit": (S, [P, P, T, T, c_uint64, c_uint64, c_void_p, c_void_p]),
    "vkt_trainer_predict": (S, [P, POINTER(Feed), c_uint32, c_uint32, T, c_void_p]),
    "vkt_trainer_evaluate": (S, [P, P, T, T, POINTER(EvalResult)]),
    "vkt_trainer_param_count": (c_uint64, [P]),
    "vkt_trainer_read_params": (S, [P, c_void_p, c_uint64]),
    "vkt_trainer_write_params": (S, [P, c_void_p, c_uint64]),
    "vkt_trainer_read_replica_params": (S, [P, c_uint32, c_void_p, c_uint64]),
    "vkt_trainer_read": (S, [P, T, c_void_p, c_uint64]),
    "vkt_trainer_stats_get": (S, [P, POINTER(TrainerStats)]),
    "vkt_trainer_stage_stats_get": (S, [P, c_uint32, POINTER(PipelineStageStats)]),
    "vkt_trainer_save": (S, [P, c_char_p]),
    "vkt_trainer_restore": (S, [P, c_char_p]),
    "vkt_trainer_check_divergence": (S, [P]),
    "vkt_checkpoint_save_dir_v2": (S, [P, c_char_p, c_uint32, c_char_p, c_size_t]),
    "vkt_checkpoint_restore_latest": (S, [P, c_char_p, POINTER(c_int), POINTER(c_uint64),
                                          c_char_p, c_size_t]),
    "vkt_checkpoint_export_safetensors_v2": (S, [c_char_p, c_char_p, POINTER(c_uint64),
                                                 c_char_p, c_size_t]),
    "vkt_trainer_import_safetensors": (S, [P, c_char_p, POINTER(ImportOptions),
                                           POINTER(ImportReport)]),
    "vkt_interrupt_install": (S, []),
    "vkt_interrupted": (c_int, []),
    "vkt_interrupt_uninstall": (None, []),
}

# vkt_progress_fn: int (*)(void *user, uint64_t step, uint64_t total, float loss)
PROGRESS_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint64, c_uint64, c_float)


def _candidates():
    env = os.environ.get("VKTRAIN_LIBRARY")
    if env:
        return [env]
    out = []
    try:  # written by cmake --install: the library's path relative to this folder
        from . import _install
        out.append(os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 _install.LIBRARY)))
    except ImportError:
        pass
    system = ctypes.util.find_library("vktrain")  # "libvktrain.so.X.Y", from ldconfig
    return out + [system] if system else out


def load():
    """The library with every prototype set; ImportError naming what was tried."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        for name, (res, args) in PROTOTYPES.items():
            try:
                f = getattr(lib, name)
            except AttributeError:
                raise ImportError("vktrain: %s has no function %s: a library of another "
                                  "version? (set VKTRAIN_LIBRARY)" % (path, name))
            f.restype = res
            f.argtypes = args
        lib.path = path
        return lib
    raise ImportError("vktrain: cannot load the vktrain library; tried " + "; ".join(tried) +
                      ". Install vktrain (cmake --install, or the .deb), or set "
                      "VKTRAIN_LIBRARY to libvktrain.so's path")


lib = load()


def text(b):
    return b.decode("utf-8", "replace") if b is not None else ""


def last_error():
    return text(lib.vkt_last_error())


def check(status, message=None):
    """Raises the status's exception (message: the library's, default vkt_last_error)."""
    if status != 0:
        raise error(status, message() if callable(message) else
                    (message if message is not None else last_error()))
