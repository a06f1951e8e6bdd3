"""snowflake.peers: an instance whose (datacenter, worker) is already in use by an answering peer
refuses to start, before it opens a listener; distinct identities start; unreachable peers are
skipped (logged)."""
import os
import subprocess
import tempfile
import unittest

from sfharness import BINARY, Server, free_port, get, request


def run_once(*args, timeout=20):
    """Starts the daemon expecting it to exit at start-up; returns (code, output)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNOWFLAKED_")}
    with tempfile.TemporaryDirectory(prefix="sf_peer_") as d:
        env.update({"SNOWFLAKED_DATA_DIR": d, "SNOWFLAKED_SERVER_PORT": str(free_port())})
        p = subprocess.run([BINARY, *args], env=env, capture_output=True, text=True,
                           timeout=timeout)
    return p.returncode, p.stdout + p.stderr


class Peers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # datacenter 0 pinned (sfharness would pick one of its own): run_once's daemons are in 0
        cls.a = Server("--set", "snowflake.worker_id=1",
                       env={"SNOWFLAKED_SNOWFLAKE_DATACENTER_ID": "0"})
        cls.peer = "127.0.0.1:%d" % cls.a.port

    @classmethod
    def tearDownClass(cls):
        cls.a.stop()

    def test_duplicate_identity_refuses_to_start(self):
        code, out = run_once("--set", "snowflake.worker_id=1", "--set",
                             "snowflake.peers=127.0.0.1:%d, %s" % (free_port(), self.peer))
        self.assertEqual(code, 1, out)
        self.assertIn("peer %s already issues IDs as datacenter 0 worker 1" % self.peer, out)
        self.assertIn("refusing to start", out)

    def test_per_loop_worker_range_counts(self):
        code, out = run_once("--set", "snowflake.worker_id=0", "--set",
                             "snowflake.per_thread_worker_ids=true", "--set", "server.threads=2",
                             "--set", "snowflake.peers=" + self.peer)
        self.assertEqual(code, 1, out)  # workers 0..1 overlap the peer's 1

    def test_distinct_identities_start(self):
        for extra in (["--set", "snowflake.worker_id=2"],
                      ["--set", "snowflake.worker_id=1", "--set", "snowflake.datacenter_id=1"]):
            srv = Server(*extra, "--set", "snowflake.peers=%s,127.0.0.1:%d" % (self.peer,
                                                                               free_port()))
            try:
                self.assertEqual(request(srv, get("/id")).status, 200)
            finally:
                srv.stop()

    def test_bad_peer_list(self):
        code, out = run_once("--set", "snowflake.peers=nonsense")
        self.assertEqual(code, 1, out)
        self.assertIn('"nonsense" is not host:port', out)


if __name__ == "__main__":
    unittest.main()
