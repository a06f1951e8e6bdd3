#!/usr/bin/env python3
"""memcached-debug as memcached's test library sees it, for run.sh.

memcached's t/lib/MemcachedTest.pm starts a server per new_memcached() call by running
`timedrun 600 ./memcached-debug <args>`, with the file's own memcached flags in <args> plus the
port and user options it adds (-p PORT, -U PORT, -u root, -o relaxed_privileges). run.sh installs
this script as that memcached-debug, so every file starts its own server with its own flags, as in
memcached's own `make test`:

  - MEMCACHED_T_SERVER=snowflaked (the default): each memcached flag is translated to snowflaked's
    settings by FLAGS / OPTIONS below, and snowflaked is exec'd with them. A flag is either mapped to
    the setting that does the same, accepted without effect when it tunes a memcached internal that
    has no counterpart here (each says why), or refused: the stand-in exits 64 naming it, the file's
    new_memcached() croaks, and the file fails visibly.
  - MEMCACHED_T_SERVER=memcached: the real memcached is exec'd with the flags unchanged (the control).

`memcached-debug -h` answers the feature probe (MemcachedTest.pm's supports_*): none of SASL,
extstore, proxy, unix sockets or privilege dropping; TLS ("enable-ssl") when MEMCACHED_T_TLS=1
(run.sh's TLS mode), where the harness adds -Z and -o ssl_chain_cert/ssl_key to every server.

Environment (set by run.sh): SNOWFLAKED_BIN, MEMCACHED_T_DATA (a directory for per-server data
directories), MEMCACHED_T_SERVER.
"""
import os
import socket
import sys
import tempfile

MIB = 1024 * 1024

# Settings every server gets: memcached's defaults where a setting corresponds (-m 64, -I 1m, -t 4,
# -c 1024), the cache on and not persisted, a prompt stop (memcached exits at once on SIGINT).
BASE = {
    "cache.enabled": "true",
    "cache.persist": "false",
    "cache.max_memory_bytes": str(64 * MIB),
    "cache.max_item_bytes": str(1 * MIB),
    "server.threads": "4",
    "server.max_connections": "1024",
    "server.host": "127.0.0.1",
    "cache.memcached_host": "127.0.0.1",
    "server.shutdown_grace_ms": "200",
    # The suite runs memcached-debug, whose debugtime command moves its clock (expirations.t).
    "cache.memcached_debug_commands": "true",
}


class Refused(Exception):
    pass


def size_arg(v):
    """memcached's -I: bytes, or a number with k/m/g (powers of 1024)."""
    mult = {"k": 1024, "m": MIB, "g": 1024 * MIB}.get(v[-1:].lower(), 1)
    num = v[:-1] if mult != 1 else v
    if not num.isdigit():
        raise Refused("-I %s: not a size" % v)
    return str(int(num) * mult)


def mib_arg(v):
    if not v.isdigit():
        raise Refused("-m %s: not a number of megabytes" % v)
    return str(int(v) * MIB)


def listen_arg(v):
    if v not in ("127.0.0.1", "0.0.0.0", "localhost"):
        raise Refused("-l %s: only loopback and the wildcard address are used here" % v)
    return v


# Flags with a value: flag -> (setting, converter). None as the setting: accepted, no effect.
VALUE_FLAGS = {
    "-p": ("cache.memcached_port", str),
    "-m": ("cache.max_memory_bytes", mib_arg),
    "-I": ("cache.max_item_bytes", size_arg),
    "-t": ("server.threads", str),
    "-c": ("server.max_connections", str),
    "-b": ("server.backlog", str),
    "-l": ("cache.memcached_host", listen_arg),
    # -U: memcached's UDP port. We serve no UDP (the UDP files are excluded); -U 0 is the same.
    "-U": (None, str),
    # -u: the user memcached switches to when started as root; the test runs us as it is.
    "-u": (None, str),
    "-R": ("cache.memcached_reqs_per_event", str),
    # -Y: ASCII authentication against a file of user:password lines (ascii-auth.t)
    "-Y": ("cache.memcached_auth_file", os.path.abspath),
}

# Flags without a value: flag -> setting=value, or None (accepted, no effect).
BOOL_FLAGS = {
    "-A": "cache.memcached_shutdown=true",  # the shutdown command
    "-F": "cache.memcached_flush_all=false",
    "-C": "cache.memcached_cas=false",
    "-M": "cache.evictions=false",  # errors instead of evictions
    "-W": "cache.memcached_watch=false",  # the watch command refused
    "-X": "cache.memcached_key_listing=false",  # stats cachedump, lru_crawler metadump refused
    "-v": None,  # verbosity of memcached's own stderr log; ours has log.level
    "-vv": None,
    "-vvv": None,
    # -Z: memcached's TLS, on every listener (memcached_standin_tls below moves -p's port to
    # our TLS listener and turns the plaintext one off, or keeps it on -l notls:'s port)
    "-Z": "cache.memcached_tls.enabled=true",
}

def seconds_or_off(v):
    if not v.isdigit():
        raise Refused("%s: not a number of seconds" % v)
    return str(int(v)) if int(v) else None  # memcached's 0 = off: keep our default


# -o name[=value] options: name -> (setting, converter), a list of them, or None (accepted,
# no effect: why).
OPTIONS = {
    "idle_timeout": ("cache.memcached_idle_timeout_s", seconds_or_off),
    "relaxed_privileges": None,  # memcached's seccomp sandbox; we have none to relax
    "modern": None,  # memcached's preset of its own internals (segmented LRU, crawler, ...)
    # no_modern also starts memcached without its LRU crawler (lru_crawler enable needed) and
    # with one LRU per class (lru_segmented no)
    "no_modern": [("cache.memcached_lru_crawler", lambda v: "false"),
                  ("cache.lru_segmented", lambda v: "false")],
    "slab_chunk_max": None,  # slab page geometry: we have no slab pages (size classes are accounting)
    "slab_reassign": None,  # moving slab pages between classes: no pages to move
    "slab_automove": None,
    "slab_automove_window": None,
    # memcached's crawler thread: whether lru_crawler crawl/metadump run before `lru_crawler
    # enable` (our expiry sweep runs either way)
    "lru_crawler": ("cache.memcached_lru_crawler", lambda v: "true"),
    "no_lru_crawler": ("cache.memcached_lru_crawler", lambda v: "false"),
    # memcached's maintainer thread juggles the HOT/WARM/COLD segments; our store does the same
    # juggling inline (store.h), so the option is whether the LRU is segmented
    "lru_maintainer": ("cache.lru_segmented", lambda v: "true"),
    "no_lru_maintainer": ("cache.lru_segmented", lambda v: "false"),
    # memcached's temporary TTL LRU (it also sets temp_lru): items stored with a TTL up to it
    # are never evicted
    "temporary_ttl": ("cache.memcached_temporary_ttl_s", seconds_or_off),
    "watcher_logbuf_size": None,  # the size of memcached's watcher log buffer
    # memcached's TLS options (-Z; MemcachedTest.pm adds the first two under SSL_TEST=1) on our
    # cache.memcached_tls.* keys
    "ssl_chain_cert": ("cache.memcached_tls.cert_file", os.path.abspath),
    "ssl_key": ("cache.memcached_tls.key_file", os.path.abspath),
    "ssl_ca_cert": ("cache.memcached_tls.client_ca_file", os.path.abspath),
    "ssl_verify_mode": ("cache.memcached_tls.verify_client", lambda v: ssl_verify_mode(v)),
    "ssl_min_version": ("cache.memcached_tls.min_version", lambda v: ssl_min_version(v)),
    "ssl_ciphers": ("cache.memcached_tls.cipher_list", str),
    # memcached's server-side session cache: resumption on; without it memcached resumes
    # nothing. Ours resumes by stateless tickets (docs/tls.md), the same switch.
    "ssl_session_cache": ("cache.memcached_tls.session_tickets", lambda v: "true"),
    # the size of memcached's per-thread TLS write buffer; ours writes records from the
    # connection's output buffer (stats settings shows memcached's default, 16384)
    "ssl_wbuf_size": None,
}


def ssl_verify_mode(v):
    """memcached's ssl_verify_mode: 0 none, 1 request (a certificate sent must verify),
    2 require, 3 once (require on the first handshake; we never renegotiate, so = 2)."""
    modes = {"0": "none", "1": "optional", "2": "required", "3": "required"}
    if v not in modes:
        raise Refused("-o ssl_verify_mode=%s: not 0-3" % v)
    return modes[v]


def ssl_min_version(v):
    """memcached's ssl_min_version: 0 tlsv1, 1 tlsv1.1, 2 tlsv1.2, 3 tlsv1.3. We serve 1.2 and up."""
    versions = {"2": "1.2", "3": "1.3", "tlsv1.2": "1.2", "tlsv1.3": "1.3"}
    if v not in versions:
        raise Refused("-o ssl_min_version=%s: only TLS 1.2 (2) and 1.3 (3) are served here" % v)
    return versions[v]


def listen_list(v, settings):
    """memcached's -l with TLS: a comma list of [notls:]host:port; the notls: one is our
    plaintext memcached port, the other the TLS port (ssl_ports.t)."""
    for part in v.split(","):
        notls = part.startswith("notls:")
        host, _, port = part[6 if notls else 0:].rpartition(":")
        if not host or not port.isdigit():
            raise Refused("-l %s: only [notls:]host:port entries" % part)
        settings["cache.memcached_host"] = listen_arg(host)
        settings["-l-plain-port" if notls else "-l-tls-port"] = port


def translate(args):
    settings = dict(BASE)
    notes = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-l" and i + 1 < len(args) and ":" in args[i + 1]:
            listen_list(args[i + 1], settings)
            i += 2
            continue
        if a in VALUE_FLAGS:
            if i + 1 >= len(args):
                raise Refused("%s needs a value" % a)
            key, conv = VALUE_FLAGS[a]
            value = conv(args[i + 1])
            if key:
                settings[key] = value
            else:
                notes.append("%s %s: no effect here" % (a, args[i + 1]))
            i += 2
            continue
        if a in BOOL_FLAGS:
            kv = BOOL_FLAGS[a]
            if kv:
                k, v = kv.split("=", 1)
                settings[k] = v
            else:
                notes.append("%s: no effect here" % a)
            i += 1
            continue
        if a == "-o":
            if i + 1 >= len(args):
                raise Refused("-o needs a value")
            for opt in args[i + 1].split(","):
                name, _, value = opt.partition("=")
                if name not in OPTIONS:
                    raise Refused("-o %s: no counterpart in snowflaked" % opt)
                mapped = OPTIONS[name]
                pairs = mapped if isinstance(mapped, list) else [mapped] if mapped else []
                applied = False
                for key, conv in pairs:
                    if conv(value) is not None:
                        settings[key] = conv(value)
                        applied = True
                if not applied:
                    notes.append("-o %s: memcached internal, no effect here" % opt)
            i += 2
            continue
        raise Refused("%s: no counterpart in snowflaked" % a)
    # memcached: "temporary_ttl requires lru_maintainer to be enabled" (exit 64 as it does)
    if settings.get("cache.memcached_temporary_ttl_s") and \
            settings.get("cache.lru_segmented") == "false":
        raise Refused("-o temporary_ttl requires lru_maintainer to be enabled")
    # memcached's -Z makes every listener TLS: the TLS listener takes -p's port (or the TLS entry
    # of -l), the plaintext memcached listener is off unless -l named a notls: port. Session
    # resumption only with -o ssl_session_cache, as memcached.
    # (-l's ports win over -p, as in memcached)
    tls_port = settings.pop("-l-tls-port", None)
    plain_port = settings.pop("-l-plain-port", None)
    if settings.pop("cache.memcached_tls.enabled", None):
        settings["cache.memcached_tls.port"] = tls_port or settings.get("cache.memcached_port", "11211")
        settings["cache.memcached_port"] = plain_port or "0"
        settings.setdefault("cache.memcached_tls.session_tickets", "false")
        if not settings.get("cache.memcached_tls.cert_file") or \
                not settings.get("cache.memcached_tls.key_file"):
            raise Refused("-Z needs -o ssl_chain_cert and -o ssl_key")
    elif any(k.startswith("cache.memcached_tls.") for k in settings) or tls_port:
        raise Refused("ssl_* options and TLS -l entries need -Z")
    # memcached's -l sets the address of every listener; ours has the HTTP API beside it.
    if settings["cache.memcached_host"] == "localhost":
        settings["cache.memcached_host"] = "127.0.0.1"
    return settings, notes


def release_build_args(argv):
    """The flags for Debian's release memcached: without `-o relaxed_privileges`, which only
    memcached's debug build (the suite's memcached-debug) knows."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "-o" and i + 1 < len(argv):
            opts = [o for o in argv[i + 1].split(",") if o != "relaxed_privileges"]
            if opts:
                out += ["-o", ",".join(opts)]
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def free_port(taken):
    """A free loopback port for our HTTP listener, not the memcached port the test library chose
    (it bound and released that one, so the kernel may hand it out again)."""
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if str(port) != taken:
            return port


def main(argv):
    if argv[:1] == ["-h"]:
        print("memcached 1.6.18 (stand-in: snowflaked's memcached listener, run by test/memcached_t)")
        if os.environ.get("MEMCACHED_T_TLS") == "1":
            # MemcachedTest.pm's supports_tls: SSL_TEST=1 runs the files over TLS
            print("-Z, --enable-ssl          enable TLS/SSL (cache.memcached_tls)")
        return 0
    log = os.environ.get("MEMCACHED_T_SERVER_LOG")
    if log:  # the server's output beside the file's TAP output, not inside it
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    data = tempfile.mkdtemp(prefix="server.", dir=os.environ.get("MEMCACHED_T_DATA"))
    with open(os.path.join(data, "pid"), "w") as f:  # exec keeps the pid: run.sh kills leftovers
        f.write("%d\n" % os.getpid())
    kind = os.environ.get("MEMCACHED_T_SERVER", "snowflaked")
    if kind == "memcached":
        exe = "/usr/bin/memcached"
        argv = release_build_args(argv)
        print("memcached-debug stand-in: memcached %s" % " ".join(argv), file=sys.stderr, flush=True)
        os.execv(exe, [exe] + argv)
    try:
        settings, notes = translate(argv)
    except Refused as e:
        print("memcached-debug stand-in: refused: %s" % e, file=sys.stderr)
        return 64
    settings["server.port"] = str(free_port(settings.get("cache.memcached_port")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
    env["SNOWFLAKED_DATA_DIR"] = data
    # One identity per process on a host (snowflaked refuses a second): files that start several
    # servers at once get one each, from the pid the exec keeps (768 apart to collide).
    env["SNOWFLAKED_SNOWFLAKE_DATACENTER_ID"] = str(8 + (os.getpid() // 32) % 24)
    env["SNOWFLAKED_SNOWFLAKE_WORKER_ID"] = str(os.getpid() % 32)
    cmd = [os.environ["SNOWFLAKED_BIN"]]
    for k, v in settings.items():
        cmd += ["--set", "%s=%s" % (k, v)]
    print("memcached-debug stand-in: memcached %s -> %s%s" % (
        " ".join(argv), " ".join(cmd[1:]), "".join("\n  (%s)" % n for n in notes)), file=sys.stderr, flush=True)
    os.execve(cmd[0], cmd, env)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
