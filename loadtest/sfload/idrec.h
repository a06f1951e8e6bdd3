/* --ids-out-v2: every ID received, with where and when it came from, as fixed 16-byte records.
 *
 * Record (all little-endian, 16 bytes, no header; the file size is a multiple of 16):
 *   bytes 0-7    id      u64  the ID as received
 *   bytes 8-9    target  u16  index of the target (command-line order, 0-based)
 *   bytes 10-13  ms      u32  receive time: ms since sfload started (its monotonic clock)
 *   bytes 14-15  conn    u16  bits 0-14: connection number (0..32767, over all threads);
 *                             bit 15 (IDREC_FRESH): first ID since that connection (re)connected
 * A checker groups records by target (daemon) and time; within one connection the records are in
 * receive order, and a fresh bit starts a new TCP connection (so a new order stream).
 *
 * Writing: one idrec_file per run, shared by the load threads; each thread has an idrec_writer that
 * fills a 64 KiB buffer and appends it with pwrite at an offset taken by an atomic add, so no lock
 * is taken and memory stays bounded whatever the run's length. Chunks of different threads
 * interleave in the file; a connection belongs to one thread, so its records stay in order. A
 * write error is remembered (the first errno) and reported by idrec_close; the run then fails.
 */
#ifndef SFLOAD_IDREC_H
#define SFLOAD_IDREC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IDREC_BYTES    16
#define IDREC_FRESH    0x8000u
#define IDREC_CONN_MAX 0x7fffu
#define IDREC_BUF_RECS 4096 /* 64 KiB per writer */

typedef struct idrec {
    uint64_t id;
    uint16_t target;
    uint32_t ms;
    uint16_t conn; /* 0..IDREC_CONN_MAX */
    bool fresh;
} idrec;

void idrec_encode(const idrec *r, unsigned char out[IDREC_BYTES]);
/* -1 if the connection field is out of range (it cannot be: there is no other invalid record). */
int idrec_decode(const unsigned char in[IDREC_BYTES], idrec *r);

typedef struct idrec_file {
    int fd;
    _Atomic uint64_t offset; /* where the next chunk goes */
    _Atomic int error;       /* the first errno of a failed write, or 0 */
} idrec_file;

typedef struct idrec_writer {
    idrec_file *f;
    size_t n; /* records in buf */
    unsigned char buf[IDREC_BUF_RECS * IDREC_BYTES];
} idrec_writer;

/* Creates (truncates) path. 0, or -1 with errno set. */
int idrec_open(idrec_file *f, const char *path);
/* Flushes nothing (writers flush themselves); closes the file. 0, or -1 with errno set (the first
 * write error of any writer, or close's). */
int idrec_close(idrec_file *f);
void idrec_writer_init(idrec_writer *w, idrec_file *f);
void idrec_writer_add(idrec_writer *w, const idrec *r);
void idrec_writer_flush(idrec_writer *w);

#endif
