#!/usr/bin/python3
"""Reads and checks the summaries `vkt train --logdir` writes, independently of the
writer (engine/io/summary.c): Python standard library only, its own CRC32C (bit by bit,
no table) and its own protobuf decoder.

usage: tfevents_reader.py LOGDIR [--tags t1,t2,...] [--every N] [--last-step N]
       tfevents_reader.py --selftest

For the single events.out.tfevents.* file in LOGDIR and the scalars.*.csv beside it:
 - every TFRecord: 8-byte little-endian length, masked CRC32C of those 8 bytes, the
   data, masked CRC32C of the data; no trailing bytes;
 - every Event decoded field by field (varint, fixed64, length-delimited, fixed32 wire
   types; unknown fields or wire types are errors): the first has file_version
   "brain.Event:2" and no summary; each later one a finite wall_time, a step and a
   Summary with one Value {tag, simple_value};
 - tags: each in --tags, each of --tags present; per tag, steps strictly increasing;
   overall steps never decrease; values finite; with --every N, train/* scalars at
   multiples of N or --last-step;
 - the CSV: header step,wall_time,tag,value and one row per scalar event, in the same
   order, with equal step and tag, the same float32 value and wall_time within 1e-5 s.
Exit status 0 when everything holds, 1 with a message naming the record otherwise.
"""
import csv
import glob
import math
import os
import struct
import sys


def crc32c(data):
    """CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def selftest():
    """Published CRC32C answers (RFC 3720 B.4, and the common check value)."""
    vectors = [
        (b"123456789", 0xE3069283),
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
    ]
    for data, want in vectors:
        got = crc32c(data)
        if got != want:
            raise SystemExit("selftest: crc32c(%r) = %08x, want %08x" % (data[:12], got, want))


class Bad(Exception):
    pass


def read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise Bad("varint runs past the end of the message")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise Bad("varint longer than 10 bytes")


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Bad("field number 0")
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise Bad("fixed64 field %d truncated" % number)
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise Bad("length-delimited field %d runs past the end (%d bytes)" % (number, n))
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise Bad("fixed32 field %d truncated" % number)
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise Bad("wire type %d of field %d is not used by Event" % (wire, number))
        yield number, wire, value


def expect_wire(number, wire, want, what):
    if wire != want:
        raise Bad("%s (field %d) has wire type %d, want %d" % (what, number, wire, want))


def decode_value(buf):
    tag, simple = None, None
    for number, wire, value in fields(buf):
        if number == 1:
            expect_wire(number, wire, 2, "Value.tag")
            tag = value.decode("utf-8")
        elif number == 2:
            expect_wire(number, wire, 5, "Value.simple_value")
            simple = struct.unpack("<f", value)[0]
        else:
            raise Bad("unexpected Value field %d" % number)
    if tag is None or simple is None:
        raise Bad("Value lacks tag or simple_value")
    return tag, simple


def decode_event(buf):
    ev = {"step": 0, "values": []}
    for number, wire, value in fields(buf):
        if number == 1:
            expect_wire(number, wire, 1, "Event.wall_time")
            ev["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            expect_wire(number, wire, 0, "Event.step")
            ev["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3:
            expect_wire(number, wire, 2, "Event.file_version")
            ev["file_version"] = value.decode("utf-8")
        elif number == 5:
            expect_wire(number, wire, 2, "Event.summary")
            ev["summary"] = True
            for n2, w2, v2 in fields(value):
                if n2 != 1:
                    raise Bad("unexpected Summary field %d" % n2)
                expect_wire(n2, w2, 2, "Summary.value")
                ev["values"].append(decode_value(v2))
        else:
            raise Bad("unexpected Event field %d" % number)
    if "wall_time" not in ev or not math.isfinite(ev["wall_time"]):
        raise Bad("Event lacks a finite wall_time")
    return ev


def read_records(path):
    data = open(path, "rb").read()
    pos, records = 0, []
    while pos < len(data):
        where = "record %d at offset %d" % (len(records), pos)
        if pos + 12 > len(data):
            raise Bad("%s: truncated header (%d bytes left)" % (where, len(data) - pos))
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(crc32c(header)) != len_crc:
            raise Bad("%s: length CRC mismatch (%08x stored, %08x computed)"
                      % (where, len_crc, masked(crc32c(header))))
        if pos + 12 + length + 4 > len(data):
            raise Bad("%s: data of %d bytes truncated" % (where, length))
        body = data[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if masked(crc32c(body)) != data_crc:
            raise Bad("%s: data CRC mismatch (%08x stored, %08x computed)"
                      % (where, data_crc, masked(crc32c(body))))
        try:
            records.append(decode_event(body))
        except Bad as e:
            raise Bad("%s: %s" % (where, e))
        pos += 16 + length
    return records


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(logdir, tags, every, last_step):
    events = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    csvs = glob.glob(os.path.join(logdir, "scalars.*.csv"))
    if len(events) != 1 or len(csvs) != 1:
        raise Bad("want one event file and one CSV in %s, found %s" % (logdir, events + csvs))
    records = read_records(events[0])
    if not records:
        raise Bad("no records")
    first = records[0]
    if first.get("file_version") != "brain.Event:2" or first.get("summary"):
        raise Bad("record 0: want file_version brain.Event:2 and no summary, got %r" % first)
    scalars, last_per_tag, last_step_seen = [], {}, -1
    for i, ev in enumerate(records[1:], 1):
        if "file_version" in ev or len(ev["values"]) != 1:
            raise Bad("record %d: want one Value and no file_version, got %r" % (i, ev))
        if ev["wall_time"] < first["wall_time"]:
            raise Bad("record %d: wall_time before the first record's" % i)
        tag, value = ev["values"][0]
        step = ev["step"]
        if tags and tag not in tags:
            raise Bad("record %d: unexpected tag %r" % (i, tag))
        if not math.isfinite(value):
            raise Bad("record %d: %s = %r is not finite" % (i, tag, value))
        if step < last_step_seen:
            raise Bad("record %d: step %d after step %d" % (i, step, last_step_seen))
        if step <= last_per_tag.get(tag, -1):
            raise Bad("record %d: %s step %d not after %d" % (i, tag, step, last_per_tag[tag]))
        if every and tag.startswith("train/") and step % every and step != last_step:
            raise Bad("record %d: %s at step %d, not a multiple of %d" % (i, tag, step, every))
        last_step_seen, last_per_tag[tag] = step, step
        scalars.append((step, ev["wall_time"], tag, value))
    missing = [t for t in tags if t not in last_per_tag]
    if missing:
        raise Bad("tags never written: %s" % ", ".join(missing))
    with open(csvs[0], newline="") as f:
        rows = list(csv.reader(f))
    if rows[0] != ["step", "wall_time", "tag", "value"]:
        raise Bad("CSV header is %r" % rows[0])
    if len(rows) - 1 != len(scalars):
        raise Bad("CSV has %d rows, the event file %d scalars" % (len(rows) - 1, len(scalars)))
    for i, (row, (step, wall, tag, value)) in enumerate(zip(rows[1:], scalars), 1):
        if (int(row[0]) != step or row[2] != tag or f32(float(row[3])) != value
                or abs(float(row[1]) - wall) > 1e-5):
            raise Bad("CSV row %d %r disagrees with the event (%d, %.6f, %s, %r)"
                      % (i, row, step, wall, tag, value))
    return records, last_per_tag


def main(argv):
    selftest()
    if argv[1:] == ["--selftest"]:
        print("tfevents_reader: CRC32C known answers ok")
        return 0
    logdir, tags, every, last_step = argv[1], [], 0, -1
    i = 2
    while i < len(argv):
        if argv[i] == "--tags":
            tags = argv[i + 1].split(",")
        elif argv[i] == "--every":
            every = int(argv[i + 1])
        elif argv[i] == "--last-step":
            last_step = int(argv[i + 1])
        else:
            raise SystemExit("unknown option %s" % argv[i])
        i += 2
    try:
        records, per_tag = check(logdir, tags, every, last_step)
    except (Bad, UnicodeDecodeError, ValueError, IndexError) as e:
        print("tfevents_reader: %s: %s" % (logdir, e), file=sys.stderr)
        return 1
    print("tfevents_reader: %d records ok; tags %s; last step %d"
          % (len(records), ",".join(sorted(per_tag)), max(per_tag.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
