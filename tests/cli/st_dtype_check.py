#!/usr/bin/env python3
"""st_dtype_check.py F32_FILE OTHER_FILE DTYPE: OTHER_FILE (a vkt export --dtype DTYPE) holds
the tensors of F32_FILE, same names and shapes, header dtype F16 or BF16, each value the
F32 one rounded to nearest even (fp16 by Python's struct 'e', bf16 from the bits): an
independent reference for the engine's rounding. Exit 0 when all agree, 1 otherwise."""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return header, data[8 + n:]


def bf16_bits(x_bits):
    if (x_bits & 0x7FFFFFFF) > 0x7F800000:
        return (x_bits >> 16) | 0x40
    return ((x_bits + 0x7FFF + ((x_bits >> 16) & 1)) >> 16) & 0xFFFF


def main():
    ref_h, ref_d = read(sys.argv[1])
    got_h, got_d = read(sys.argv[2])
    want = {"fp16": "F16", "bf16": "BF16"}[sys.argv[3]]
    if sorted(ref_h) != sorted(got_h):
        print("names differ"); return 1
    checked = 0
    for name, r in ref_h.items():
        g = got_h[name]
        if g["dtype"] != want or g["shape"] != r["shape"]:
            print(f"{name}: dtype {g['dtype']} shape {g['shape']}"); return 1
        rb, re_ = r["data_offsets"]
        gb, ge = g["data_offsets"]
        count = (re_ - rb) // 4
        if ge - gb != 2 * count:
            print(f"{name}: {ge - gb} bytes for {count} values"); return 1
        for i in range(count):
            bits = struct.unpack_from("<I", ref_d, rb + 4 * i)[0]
            h = struct.unpack_from("<H", got_d, gb + 2 * i)[0]
            if want == "F16":
                x = struct.unpack("<f", struct.pack("<I", bits))[0]
                exp = struct.unpack("<H", struct.pack("<e", x))[0]
            else:
                exp = bf16_bits(bits)
            if h != exp:
                print(f"{name}[{i}]: {h:#06x}, expected {exp:#06x}"); return 1
            checked += 1
    print(f"{checked} values agree")
    return 0 if checked else 1


sys.exit(main())
