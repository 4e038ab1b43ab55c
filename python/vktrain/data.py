"""Data sets (vkt_dataset): samples of float features and an int32 class label each, held
by the library (copied from NumPy arrays, or loaded from MNIST-style folders and CSV
files), for Trainer.fit and Trainer.evaluate."""
from ctypes import byref, c_void_p

import numpy as np

from ._handles import Handle
from ._lib import check, error, lib


class Dataset(Handle):
    """Dataset(x, y=None, classes=None): x [count, ...] (each sample flattened to its
    features, as float32), y [count] integer labels in [0, classes) (classes: max(y) + 1 by
    default; labels outside are refused by the library, naming the index)."""
    KIND = "dataset"

    def __init__(self, x, y=None, classes=None, _handle=None):
        if _handle is not None:
            super().__init__(_handle)
            return
        x = np.asarray(x)
        if x.ndim < 1:
            raise error(2, "x has no samples: an array [count, features...] is needed")
        count = x.shape[0]
        x = np.ascontiguousarray(x.reshape(count, -1) if count else x.reshape(0, 0),
                                 dtype=np.float32)
        yp = None
        if y is not None:
            y = np.asarray(y)
            if y.ndim != 1 or y.shape[0] != count:
                raise error(2, "y has shape %s; labels [%d] (one per sample of x) are needed"
                            % (list(y.shape), count))
            if not np.issubdtype(y.dtype, np.integer):
                raise error(1, "y holds %s values; integer class labels are needed" % y.dtype)
            if classes is None:
                classes = int(y.max()) + 1 if count else 0
            y = np.ascontiguousarray(y, dtype=np.int32)
            yp = y.ctypes.data
        h = c_void_p()
        check(lib.vkt_dataset_create(count, x.shape[1] if x.ndim == 2 else 0,
                                     classes or 0, x.ctypes.data, yp, byref(h)))
        super().__init__(h)

    def _destroy(self, h):
        lib.vkt_dataset_destroy(h)

    @classmethod
    def mnist(cls, folder):
        """(train, test) from an MNIST-style folder (train-images-idx3-ubyte[.gz], ...)."""
        tr, te = c_void_p(), c_void_p()
        check(lib.vkt_dataset_load_mnist(folder.encode(), byref(tr), byref(te)))
        return cls(None, _handle=tr), cls(None, _handle=te)

    @classmethod
    def csv(cls, path, label_column):
        """A CSV file with a header: the column `label_column` holds the labels."""
        h = c_void_p()
        check(lib.vkt_dataset_load_csv(path.encode(), label_column.encode(), byref(h)))
        return cls(None, _handle=h)

    @property
    def count(self):
        return lib.vkt_dataset_count(self._handle())

    def __len__(self):
        return self.count

    @property
    def features(self):
        return lib.vkt_dataset_features(self._handle())

    @property
    def classes(self):
        return lib.vkt_dataset_classes(self._handle())

    @property
    def x(self):
        """A copy of the features, [count, features] float32."""
        n, f = self.count, self.features
        p = lib.vkt_dataset_x(self._handle())
        return np.ctypeslib.as_array(p, shape=(n * f,)).reshape(n, f).copy() if n * f else \
            np.zeros((n, f), np.float32)

    @property
    def y(self):
        """A copy of the labels, [count] int32."""
        n = self.count
        p = lib.vkt_dataset_y(self._handle())
        return np.ctypeslib.as_array(p, shape=(n,)).copy() if n else np.zeros(0, np.int32)
