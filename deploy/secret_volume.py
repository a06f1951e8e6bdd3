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
"""
import os
import shutil
import time


class SecretVolume:
    def __init__(self, path, files):
        """files: {key: path of a file whose bytes become that key's content}."""
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.version = None
        self.updates = 0
        self._write(files)
        for key in files:
            os.symlink(os.path.join("..data", key), os.path.join(path, key))

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
            os.chmod(dst, 0o644)
        tmp = os.path.join(self.path, "..data_tmp")
        os.symlink(version, tmp)
        os.rename(tmp, os.path.join(self.path, "..data"))
        if self.version:
            shutil.rmtree(os.path.join(self.path, self.version))
        self.version = version
