"""The C structs the Python module mirrors (python/vktrain/_lib.py) have the layout the C
compiler gives them: every field's offset and size and every struct's size, from
tests/python/abi_layout.c ($VKT_ABI_LAYOUT, built by ctest's build)."""
import json
import os
import subprocess
import unittest

from vktrain import _lib


class Abi(unittest.TestCase):
    def test_layouts(self):
        exe = os.environ.get("VKT_ABI_LAYOUT")
        if not exe:
            self.skipTest("VKT_ABI_LAYOUT is not set (ctest sets it to the abi_layout program)")
        c = json.loads(subprocess.check_output([exe]))
        self.assertEqual(sorted(c), sorted(_lib.STRUCTS), "the same structs on both sides")
        checked = 0
        for name, cls in _lib.STRUCTS.items():
            want = c[name]
            self.assertEqual(want["size"], _lib.ctypes.sizeof(cls), "sizeof(%s)" % name)
            py = [f for f, _ in cls._fields_]
            self.assertEqual(list(want["fields"]), py, "%s: the fields, in order" % name)
            for f in py:
                d = getattr(cls, f)
                self.assertEqual(want["fields"][f], [d.offset, d.size], "%s.%s" % (name, f))
                checked += 1
        self.assertGreater(checked, 130)  # 140 fields of 18 structs


if __name__ == "__main__":
    unittest.main()
