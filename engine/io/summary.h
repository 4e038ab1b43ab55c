/* summary.h - internals of the io layer's summaries: CRC32C and the TFRecord framing
 * of TensorBoard event files (engine/io/crc32c.c, engine/io/summary.c). */
#ifndef VKT_IO_SUMMARY_H
#define VKT_IO_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "vkt.h"

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial and final XOR
 * 0xFFFFFFFF), as used by iSCSI (RFC 3720) and TFRecord. `crc` is a previous result to
 * continue from (0 to start): crc32c(crc32c(0, a, n), b, m) == CRC of a||b. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, of the CRC32C. */
uint32_t crc32c_masked(const void *data, size_t n);
/* The 256-entry lookup table (for its test). */
const uint32_t *crc32c_table(void);

/* Encodes one Event protobuf into buf (capacity cap) and returns its length, or 0 if it
 * does not fit:  Event { double wall_time = 1; int64 step = 2; string file_version = 3
 * (only when `file_version` is not NULL); Summary summary = 5 (only when `tag` is not
 * NULL) { Value value = 1 { string tag = 1; float simple_value = 2; } } }. */
size_t summary_event_encode(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                        const char *file_version, const char *tag, float value);

/* Frames `data` as one TFRecord into buf (capacity >= n + 16): uint64 length (LE),
 * masked CRC32C of those 8 bytes (LE), the data, masked CRC32C of the data (LE).
 * Returns n + 16. */
size_t summary_tfrecord_frame(uint8_t *buf, const uint8_t *data, size_t n);

#endif
