"""Lifetimes of the library's handles: each Python object owns one, destroys it on close()
(or when collected), and keeps alive what it needs (a trainer its graph and instance). At
interpreter exit every live handle is closed in dependency order: trainers first, then
data sets and graphs, then instances."""
import atexit
import weakref

from ._lib import error

# close order at exit: lower first
ORDER = {"trainer": 0, "dataset": 1, "graph": 1, "instance": 2}
_live = weakref.WeakSet()


class Handle:
    """Owns a handle `_h`; subclasses set KIND and _destroy(h)."""
    KIND = "handle"

    def __init__(self, h):
        self._h = h
        self._users = 0      # objects that need this one alive (trainers of a graph)
        _live.add(self)

    @property
    def closed(self):
        return not self._h

    def _handle(self):
        if not self._h:
            raise error(9, "this %s is closed" % self.KIND)  # VKT_ERROR_STATE
        return self._h

    def close(self):
        """Destroys the handle (a second close does nothing). A graph or instance still
        used by an open trainer cannot close: VKT_ERROR_STATE."""
        if not self._h:
            return
        if self._users:
            raise error(9, "this %s is used by %d open trainer(s): close them first"
                        % (self.KIND, self._users))
        h, self._h = self._h, None
        self._destroy(h)
        self._released()

    def _released(self):
        """Called once the handle is destroyed (a trainer lets go of its graph here)."""

    def _destroy(self, h):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h and not self._users:
                self.close()
        except Exception:
            pass


@atexit.register
def _close_all():
    for obj in sorted(list(_live), key=lambda o: ORDER.get(o.KIND, 1)):
        try:
            obj._users = 0
            obj.close()
        except Exception:
            pass
