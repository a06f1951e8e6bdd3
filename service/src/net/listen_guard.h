/* Who else listens on our port: the kernel's table of LISTEN sockets on one port, and the
 * process owning one (its socket inode found among /proc/<pid>/fd links).
 *
 * Why: SO_REUSEPORT lets any process of our uid join (or sit beside, on a more specific address
 * or bound to a device) a port we listen on, and for snowflaked a shared port means duplicate
 * IDs. net/loop.c probes the port before binding (a bind without SO_REUSEPORT fails with
 * EADDRINUSE when anything listens on an overlapping address), checks after listening that every
 * overlapping LISTEN socket is one of its own, and the daemon's housekeeping re-checks every
 * second (net_server_watch).
 *
 * Two sources. NETLINK_SOCK_DIAG (inet_diag, what `ss` reads) first: a dump of the LISTEN
 * sockets of each family, filtered by port in the kernel, with each socket's inode, uid, bound
 * device (SO_BINDTODEVICE) and, for IPv6, the INET_DIAG_SKV6ONLY attribute: a [::] socket with
 * IPV6_V6ONLY takes no IPv4 connection (nginx's `listen [::]:80`). Without it (a kernel without
 * inet_diag, a seccomp or RestrictAddressFamilies that forbids AF_NETLINK), /proc/net/tcp and
 * tcp6: one line per socket, "sl local rem st ... uid timeout inode ...", addresses in hex as the
 * kernel's u32 words print on this host (the parser turns them back into network-order bytes by
 * the same rule), port in hex, state 0A = LISTEN; the kernel prints the listening hash before the
 * established one, so a reader stops at the first line in another state. /proc shows neither the
 * device nor IPV6_V6ONLY: such a listener then counts as overlapping (the safe side). Neither
 * source: the scan says so (-1) and the callers do without it (the probe still refuses).
 *
 * Threads: any; nothing is shared. lg_scan and lg_owner read files and a netlink socket (a few
 * ms at most for the owner's walk over /proc): start-up and housekeeping only, never a loop
 * thread.
 */
#ifndef SF_NET_LISTEN_GUARD_H
#define SF_NET_LISTEN_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#define LG_MAX_FOUND 64 /* listeners on one port a scan reports at most */

typedef struct lg_addr {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* network order; IPv4 in the first 4 bytes */
    uint16_t port;    /* host order */
    int8_t v6only;    /* AF_INET6: 1 IPV6_V6ONLY, 0 dual-stack, -1 not known (counts as 0) */
} lg_addr;

typedef struct lg_listener {
    lg_addr a;
    unsigned long inode; /* the socket's inode: fstat(fd).st_ino of its descriptor */
    unsigned uid;
    unsigned ifindex; /* SO_BINDTODEVICE's device, 0 none (or not known: !diag) */
    bool diag;        /* from sock_diag: ifindex and a.v6only are known */
} lg_listener;

/* One line of /proc/net/tcp (family AF_INET) or tcp6 (AF_INET6): 1 = a LISTEN socket (*out
 * filled), 0 = a socket in another state, -1 = not a socket line (the header, garbage). */
int lg_parse_line(const char *line, int family, lg_listener *out);
/* Every LISTEN socket on port in text (a whole file, up to the first line of another state), at
 * most cap stored; returns how many there were. */
size_t lg_parse_text(const char *text, int family, uint16_t port, lg_listener *out, size_t cap);

/* One buffer of a sock_diag dump answering the request numbered seq: the LISTEN sockets on port
 * added to out (at most cap stored, *n counts them all). 1 = the dump's end (NLMSG_DONE) was in
 * it, 0 = more to read, -1 = an error answer (*err its errno, else 0) or a malformed message. */
int lg_diag_parse(const void *buf, size_t len, uint32_t seq, uint16_t port, lg_listener *out,
                  size_t cap, size_t *n, int *err);
/* The LISTEN sockets on port from sock_diag (IPv4 and IPv6): 0 with their number in *n (at most
 * cap stored), or -1 with errno's value in *err when netlink cannot tell. */
int lg_scan_diag(uint16_t port, lg_listener *out, size_t cap, size_t *n, int *err);
/* The same from /proc/net/tcp and tcp6 (no device, v6only -1); -1 without /proc/net/tcp. */
int lg_scan_proc(uint16_t port, lg_listener *out, size_t cap, size_t *n);
/* lg_scan_diag, else lg_scan_proc. */
int lg_scan(uint16_t port, lg_listener *out, size_t cap, size_t *n);

typedef enum lg_overlap {
    LG_DISJOINT, /* no connection for one can reach the other */
    LG_SAME,     /* the same family and address: one SO_REUSEPORT group (same uid) */
    LG_OVERLAP,  /* a wildcard and an address in it, or v4 and a dual-stack [::] */
} lg_overlap;

/* How a listener on b relates to ours on a (ports compared too). A [::] socket with v6only 1
 * takes no IPv4 connection; with -1 (/proc does not show the flag) it counts as dual-stack,
 * overlapping IPv4: refusing is the safe side. */
lg_overlap lg_overlaps(const lg_addr *a, const lg_addr *b);

/* "" or, when l overlaps ours only because /proc could not show that it is IPV6_V6ONLY, a note
 * saying so ("; ..."), for messages. */
const char *lg_overlap_note(const lg_addr *ours, const lg_listener *l);

/* a from a socket address (AF_INET, AF_INET6; v6only -1: an address does not say); false for
 * another family. */
bool lg_addr_from(lg_addr *a, const struct sockaddr *sa);
/* "127.0.0.1:8080", "[::1]:8080". */
void lg_addr_text(const lg_addr *a, char *buf, size_t len);

/* The process holding socket inode, from /proc/<pid>/fd: 0 with *pid and comm (bytes outside
 * printable ASCII as '?': a process names itself), -1 when none we may look at has it (another
 * user's process, no /proc). */
int lg_owner(unsigned long inode, pid_t *pid, char *comm, size_t commlen);
/* "pid 1234 (python3)", else "uid 1000, a process /proc does not name": who holds l. */
void lg_describe(const lg_listener *l, char *buf, size_t len);

#endif
