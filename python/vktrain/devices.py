"""Instances and devices: a Vulkan instance lists the devices; trainers make their contexts
(one per replica or stage) from it. One default instance serves the module (instance())."""
import collections
from ctypes import byref, c_void_p

from ._handles import Handle
from ._lib import DeviceInfo, InstanceOptions, check, lib, text

Device = collections.namedtuple("Device", [
    "index", "name", "type", "driver_name", "driver_info", "vendor_id", "device_id",
    "api_version", "heap_sizes", "subgroup_size", "max_storage_buffer_range",
    "max_shared_memory", "max_workgroup_invocations", "compute_only_queue", "timestamps",
    "compute_queues", "timeline_semaphores", "host_import", "group", "group_size"])


class Instance(Handle):
    """vkt_instance: the Vulkan loader opened, the devices listed. `validation` turns the
    Khronos validation layer on (also VKT_VALIDATION=1); messages are counted."""
    KIND = "instance"

    def __init__(self, validation=False, loader_path=None):
        o = InstanceOptions(enable_validation=1 if validation else 0,
                            loader_path=loader_path.encode() if loader_path else None)
        h = c_void_p()
        check(lib.vkt_instance_create(byref(o), byref(h)))
        super().__init__(h)

    def _destroy(self, h):
        lib.vkt_instance_destroy(h)

    def devices(self):
        """The devices, as Device tuples."""
        h = self._handle()
        out = []
        for i in range(lib.vkt_instance_device_count(h)):
            d = DeviceInfo()
            check(lib.vkt_instance_device_info(h, i, byref(d)),
                  lambda: text(lib.vkt_instance_errmsg(h)))
            out.append(Device(i, text(d.name), text(lib.vkt_device_type_name(d.type)),
                              text(d.driver_name), text(d.driver_info), d.vendor_id,
                              d.device_id, d.api_version, list(d.heap_size[:d.heap_count]),
                              d.subgroup_size, d.max_storage_buffer_range,
                              d.max_shared_memory, d.max_workgroup_invocations,
                              bool(d.compute_only_queue), bool(d.timestamps),
                              d.compute_queues, bool(d.timeline_semaphores),
                              bool(d.host_import), d.group, d.group_size))
        return out

    def validation_count(self):
        """Validation-layer warnings and errors so far (0 without validation)."""
        return lib.vkt_instance_validation_count(self._handle())

    def select_devices(self, capacity=64):
        """The device list a trainer uses by default: VKT_DEVICES, else [0]."""
        from ctypes import c_uint32
        arr = (c_uint32 * capacity)()
        n = c_uint32()
        check(lib.vkt_instance_select_devices(self._handle(), arr, capacity, byref(n)))
        return list(arr[:n.value])


_default = None


def instance():
    """The module's default Instance, created on first use."""
    global _default
    if _default is None or _default.closed:
        _default = Instance()
    return _default


def devices():
    """The default instance's devices."""
    return instance().devices()
