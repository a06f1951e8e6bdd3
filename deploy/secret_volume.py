"""A directory laid out and updated the way the kubelet lays out and updates a Secret volume, for
the tests that prove a certificate rotation reaches a running daemon (deploy/test_replicas.py,
deploy/k8s/check_manifest.py).

The kubelet (pkg/volume/util/atomic_writer.go) never writes a file the pod sees in place:

    DIR/..2026_12_03_10_40_31.123456789/tls.crt     the files of one version of the Secret
    DIR/..data -> ..2026_12_03_10_40_31.123456789   the version in service
    DIR/tls.crt -> ..data/tls.crt                   what the pod opens (one symlink per key)

An update writes the new version into a new timestamped directory, points a new symlink
..data_tmp at it, renames ..data_tmp over ..data (one atomic rename switches every file at once)
and removes the old directory. So the files the configuration names are never written, created
or renamed: only the directory changes, which is why snowflaked watches directories
(tls.watch_files), and why a subPath mount, bound to the file it resolved at start, never sees an
update.

    vol = SecretVolume(path, {"tls.crt": cert_pem_path, "tls.key": key_pem_path, ...})
    vol.update({...})                                 # the next version, kubelet-style

From a shell (deploy/test-container.sh, which mounts the directory into a container):

    python3 deploy/secret_volume.py make DIR [--group GID] [--mode 0440] SAN...
        DIR/ca.pem: a CA (test/integration/tlscerts.py); DIR/volume: a Secret volume with tls.crt,
        tls.key and ca.crt of a server certificate of that CA for the SANs ("IP:127.0.0.1",
        "DNS:name"); DIR/next: tls.crt and tls.key of a second one (new key and serial), for a
        rotation. With --group, the files are root's and that group's, as the kubelet makes them
        with a pod's fsGroup. Prints the two serials (hex), current then next.
    python3 deploy/secret_volume.py swap VOLUME FILES_DIR [--group GID] [--mode 0440]
        the next version of VOLUME from FILES_DIR's files of the same keys, kubelet-style.
"""
import argparse
import os
import shutil
import sys
import time


class SecretVolume:
    def __init__(self, path, files, group=None, mode=0o644):
        """files: {key: path of a file whose bytes become that key's content}. group: the gid the
        files get (the pod's fsGroup; root's otherwise), mode their permission bits."""
        self.path = path
        self.group, self.mode = group, mode
        os.makedirs(path, exist_ok=True)
        self.version = None
        self.updates = 0
        self._write(files)
        for key in files:
            os.symlink(os.path.join("..data", key), os.path.join(path, key))

    @classmethod
    def existing(cls, path, group=None, mode=0o644):
        """The volume at path, made earlier (by another process)."""
        vol = cls.__new__(cls)
        vol.path, vol.group, vol.mode, vol.updates = path, group, mode, 0
        vol.version = os.readlink(os.path.join(path, "..data"))
        return vol

    def file(self, key):
        return os.path.join(self.path, key)

    def update(self, files):
        """The next version of the Secret, with the same keys, switched in by one rename."""
        self._write(files)
        self.updates += 1

    def _write(self, files):
        # The kubelet's name: ".." + the UTC time with nanoseconds; two versions in one
        # nanosecond cannot happen there, and cannot here (the old one is still present).
        now = time.time_ns()
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S", time.gmtime(now // 10**9))
        version = "%s.%09d" % (stamp, now % 10**9)
        vdir = os.path.join(self.path, version)
        os.mkdir(vdir, 0o755)
        for key, src in files.items():
            dst = os.path.join(vdir, key)
            shutil.copyfile(src, dst)
            if self.group is not None:
                os.chown(dst, 0, self.group)
            os.chmod(dst, self.mode)
        tmp = os.path.join(self.path, "..data_tmp")
        os.symlink(version, tmp)
        os.rename(tmp, os.path.join(self.path, "..data"))
        if self.version:
            shutil.rmtree(os.path.join(self.path, self.version))
        self.version = version


def main():
    ap = argparse.ArgumentParser(description="a kubelet-style Secret volume of TLS files")
    sub = ap.add_subparsers(dest="cmd", required=True)
    make = sub.add_parser("make")
    make.add_argument("dir")
    make.add_argument("sans", nargs="+")
    swap = sub.add_parser("swap")
    swap.add_argument("volume")
    swap.add_argument("files")
    for p in (make, swap):
        p.add_argument("--group", type=int)
        p.add_argument("--mode", type=lambda s: int(s, 8), default=0o644)
    args = ap.parse_args()
    if args.cmd == "swap":
        vol = SecretVolume.existing(args.volume, args.group, args.mode)
        vol.update({k: os.path.join(args.files, k) for k in os.listdir(args.files)})
        return
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test",
                                    "integration"))
    import tlscerts
    certs_dir = os.path.join(args.dir, "certs")
    os.makedirs(certs_dir)
    certs = tlscerts.Certs(certs_dir)
    shutil.copyfile(certs.ca, os.path.join(args.dir, "ca.pem"))
    cert, key = certs.server_cert("current", args.sans)
    SecretVolume(os.path.join(args.dir, "volume"),
                 {"tls.crt": cert, "tls.key": key, "ca.crt": certs.ca}, args.group, args.mode)
    nxt = os.path.join(args.dir, "next")
    os.makedirs(nxt)
    cert2, key2 = certs.server_cert("next", args.sans)
    shutil.copyfile(cert2, os.path.join(nxt, "tls.crt"))
    shutil.copyfile(key2, os.path.join(nxt, "tls.key"))
    shutil.copyfile(certs.ca, os.path.join(nxt, "ca.crt"))
    print(certs.serial_of(cert), certs.serial_of(cert2))


if __name__ == "__main__":
    main()
