#!/usr/bin/env python3
"""Measures a `juxta peer` daemon serving N connections (docs/peer.md,
"Measured"): starts a rendezvous daemon in a temporary home, connects N
in-process peers to it (the `connect_many` example of crates/juxta), then
times `juxta status`, raw control requests, GET /metrics and the stop.

Build first: cargo build --release -p juxta-cli && cargo build --release -p juxta --example connect_many
Run: python3 scripts/peer-load.py [N]   (CARGO_TARGET_DIR honoured)
"""
import json, os, signal, socket, statistics, subprocess, sys, tempfile, time

target = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "target"))
J = os.path.join(target, "release", "juxta")
EX = os.path.join(target, "release", "examples", "connect_many")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000

home = tempfile.mkdtemp(prefix="juxta-load-")
with open(os.path.join(home, "juxta.toml"), "w") as f:
    f.write('listen = "127.0.0.1:0"\nroles = ["rendezvous"]\nkey_bits = 1024\nmetrics = "127.0.0.1:0"\n'
            '[limits]\nmax_connections = %d\nmax_connections_per_addr = %d\nmax_pending_per_addr = %d\n'
            '[log]\nlevel = "warn"\n' % (2 * N, 2 * N, 2 * N))
sock = os.path.join(home, "control.sock")
p = subprocess.Popen([J, "peer", "--home", home], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
addr = None
while True:
    l = p.stdout.readline()
    if "tcp://" in l:
        addr = l.split("tcp://")[1].strip()
    if l.strip() == "ready" or not l:
        break
t = time.monotonic()
load = subprocess.Popen([EX, addr, str(N)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
print(load.stdout.readline().strip(), "in %.0f s" % (time.monotonic() - t))


def status():
    t = time.monotonic()
    r = subprocess.run([J, "status", "--home", home, "--json"], capture_output=True, text=True)
    return json.loads(r.stdout)["result"], (time.monotonic() - t) * 1e3


def raw(req, n):
    v = []
    for _ in range(n):
        c = socket.socket(socket.AF_UNIX)
        c.connect(sock)
        t = time.monotonic()
        c.sendall(req)
        d = b""
        while not d.endswith(b"\n"):
            d += c.recv(1 << 20)
        v.append((time.monotonic() - t) * 1e3)
        c.close()
    return v, len(d)


st, _ = status()
print("connections", st["connections"])
times = [status()[1] for _ in range(20)]
print("juxta status (whole command) ms: median %.1f min %.1f max %.1f" % (statistics.median(times), min(times), max(times)))
v, _ = raw(b'{"request":"status"}\n', 50)
print("status request round trip ms: median %.2f max %.2f" % (statistics.median(v), max(v)))
v, n = raw(b'{"request":"peers"}\n', 10)
print("peers request round trip ms: median %.2f max %.2f (%d B)" % (statistics.median(v), max(v), n))
host, port = st["addresses"]["metrics"].rsplit(":", 1)
v = []
for _ in range(10):
    t = time.monotonic()
    s = socket.create_connection((host, int(port)))
    s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
    while s.recv(65536):
        pass
    v.append((time.monotonic() - t) * 1e3)
print("GET /metrics ms: median %.2f" % statistics.median(v))
t = time.monotonic()
p.send_signal(signal.SIGTERM)
p.wait()
print("SIGTERM->exit with %d connections: %.1f ms, status %d" % (st["connections"], (time.monotonic() - t) * 1e3, p.returncode))
load.kill()
load.wait()
