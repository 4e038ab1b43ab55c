"""vktrain: neural-network training on any Vulkan device, from Python (docs/python.md).

A thin layer over the installed shared library (libvktrain.so) through ctypes, so nothing
is compiled against a Python version. Failed calls raise vktrain.Error (one subclass per
status: ShapeError, FormatError, FileError, ...) carrying the library's message.

    import numpy as np, vktrain
    g = vktrain.Graph(seed=1)
    x, y = g.input("x", (128, 784)), g.labels("y", 128)
    logits = g.dense(g.relu(g.dense(x, 256, "fc1")), 10, "fc2", init="glorot")
    loss = g.softmax_cross_entropy(logits, y)
    t = vktrain.Trainer(g, loss, batch=128, optimizer=vktrain.SGD(lr=0.1, momentum=0.9))
    t.fit(vktrain.Dataset(x_train, y_train), x, y, steps=620)
    print(t.evaluate(vktrain.Dataset(x_test, y_test), x, logits).accuracy)
"""
from ._lib import (DeviceLostError, DivergedError, Error, FileError, FormatError,
                   InternalError, InvalidArgumentError, LimitError, NoDeviceError,
                   NoVulkanError, OutOfMemoryError, RankTimeoutError, RemoteError, ShapeError,
                   StateError, VulkanError)
from ._lib import lib as _library
from .data import Dataset
from .devices import Device, Instance, devices, instance
from .graph import Graph, Tensor
from .train import SGD, Adam, AdamW, Optimizer, Trainer, export_safetensors

__version__ = "0.1.0"
library_path = _library.path  # the libvktrain.so in use

__all__ = ["Adam", "AdamW", "Dataset", "Device", "DeviceLostError", "DivergedError", "Error",
           "FileError", "FormatError", "Graph", "Instance", "InternalError",
           "InvalidArgumentError", "LimitError", "NoDeviceError", "NoVulkanError",
           "Optimizer", "OutOfMemoryError", "RankTimeoutError", "RemoteError", "SGD",
           "ShapeError", "StateError", "Tensor", "Trainer", "VulkanError", "devices",
           "export_safetensors", "instance", "library_path"]
