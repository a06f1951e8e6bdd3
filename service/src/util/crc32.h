/* CRC-32 (IEEE 802.3, as zlib), table-driven, incremental: crc = crc32_update(0, p, n) ... */
#ifndef SF_UTIL_CRC32_H
#define SF_UTIL_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32_update(uint32_t crc, const void *data, size_t len);

#endif
