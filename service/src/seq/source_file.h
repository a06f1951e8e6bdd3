/* The file block source: one fsync'd high-water mark per namespace in data_dir (single node).
 *
 * <dir>/<name>.seq holds one line:
 *   "snowflaked-seq 1 <next> <start> <max> <block> <adaptive> <block_min> <block_max>
 *    <token_sha256 or -> <origin> <crc32 of the text before it, 8 hex digits>\n"
 * next is the first number never granted: every number below it may have been issued. A reserve
 * writes next + n with util/fsio.h's atomic replacement (tmp, fsync, rename, fsync of the
 * directory) on the source's worker thread and reports the block only once that returned 0, so a
 * restart never reissues and a full disk (ENOSPC) or any write error refuses (SEQ_FAILED) instead
 * of handing out numbers that were not saved. origin is "config" or "api": only namespaces
 * created over the API come back through list (a namespace removed from the configuration keeps
 * its file, and its counter if it is declared again, but is not served).
 *
 * One worker thread serves every namespace, in order of arrival, and finishes what it accepted
 * before stop returns; a corrupt file stops the start
 * (the daemon refuses to guess which numbers were issued), as the lease file does.
 * delay_ms (a test knob, sequences.reserve_delay_ms): every reserve waits that long first.
 */
#ifndef SF_SEQ_SOURCE_FILE_H
#define SF_SEQ_SOURCE_FILE_H

#include <limits.h>
#include <stdint.h>

#include "seq/source.h"

#define SEQ_FILE_DIR "sequences" /* under data_dir */

typedef struct seq_file_source seq_file_source;

/* A source over dir (created at start when missing, its parent must exist). Returns NULL with
 * err. Fill a seq_source with seq_file_source_ops; free with seq_file_source_free after stop. */
seq_file_source *seq_file_source_new(const char *dir, uint32_t delay_ms, char *err,
                                     size_t errlen);
void seq_file_source_ops(seq_file_source *fs, seq_source *out);
void seq_file_source_free(seq_file_source *fs);

/* The file's contents, for tests and the start: 1 read, 0 absent, -1 corrupt or unreadable (err). */
typedef struct seq_file_state {
    uint64_t next;
    seq_ns_def def;
    bool api; /* origin "api" */
} seq_file_state;
int seq_file_read(const char *path, const char *name, seq_file_state *st, char *err,
                  size_t errlen);

#endif
