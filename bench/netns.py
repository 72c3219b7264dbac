"""Network namespaces for the network chaos run (needs root).

A private /24 (the first free one in 10.231.0.0/16): the host holds its .1,
on an interface `hfc<pid>h`, where the run's Redis, Postgres and receiver
listen. Each process group (each worker, the producer) gets a namespace of
its own, `hfc<pid>-<name>`, with `eth0`, an address on the /24 and a default
route through the .1. Between them is one more namespace, the wire
(`hfc<pid>-wire`), holding a bridge: the host's interface and every
namespace's `eth0` are each one end of a veth pair whose other end is a port
of that bridge. Every packet between a worker or the producer and the
services therefore crosses two veth pairs and the bridge.

Faults are set per namespace by `set(name, delay_ms=(lo, hi), loss=p,
block=[ports])`: in the wire, iptables (through the bridge's netfilter
hooks) hands every IPv4 packet to or from a namespace's port to a netem in
user space (bench/netem.py), which holds, drops, or partitions it. The
kernel this was written on has no sch_netem, so `tc netem` is not used.

Everything made here is named `hfc<pid>…` (the pid of the run), so
`cleanup_stale()` can remove what a run killed with SIGKILL left behind, and
`down()` removes it all: the netem processes and the namespaces (their veth
pairs, the bridge, the rules and queues go with them; so does the host's
interface, the other end of a veth in the wire).
"""
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "hfc"


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def ns_pids(ns):
    return [int(p) for p in sh("ip", "netns", "pids", ns, check=False).split()]


def kill_ns_processes(ns, grace=5.0):
    """Stops every process in namespace `ns` (TERM, then KILL after `grace`)."""
    pids = ns_pids(ns)
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + grace
    while pids and time.time() < deadline:
        time.sleep(0.1)
        pids = [p for p in ns_pids(ns)]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def remove_run(tag):
    """Removes everything named after run `tag` (its namespaces, with the
    processes in them, and the host's end of the wire)."""
    for ns in sh("ip", "netns", "list", check=False).split("\n"):
        name = ns.split(" ")[0]
        if name.startswith(tag + "-"):
            kill_ns_processes(name, grace=2.0)
            sh("ip", "netns", "del", name, check=False)
    for link in os.listdir("/sys/class/net"):
        if link.startswith(tag):
            sh("ip", "link", "del", link, check=False)


def cleanup_stale():
    """Removes what earlier runs left behind, if the run that made it is gone."""
    names = sh("ip", "netns", "list", check=False).split("\n") + os.listdir("/sys/class/net")
    tags = {m.group(1) for n in names if (m := re.match(rf"({PREFIX}(\d+))", n.split(" ")[0]))}
    for tag in tags:
        if not pid_alive(int(tag[len(PREFIX):])):
            print(f"removing what an earlier run ({tag}) left behind", file=sys.stderr)
            remove_run(tag)


def free_subnet():
    """A /24 in 10.231.0.0/16 that no interface or route of the host uses."""
    used = sh("ip", "-4", "-o", "addr", "show") + sh("ip", "-4", "route", "show", "table", "all", check=False)
    taken = [ipaddress.ip_network(m, strict=False) for m in re.findall(r"(\d+\.\d+\.\d+\.\d+/\d+)", used)]
    for third in range(0, 256):
        net = ipaddress.ip_network(f"10.231.{third}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise SystemExit("no free /24 in 10.231.0.0/16")


class Network:
    """The wire, one namespace per name, and a netem for each."""

    def __init__(self, names, workdir, seed=1):
        self.tag = f"{PREFIX}{os.getpid()}"
        self.names = list(names)
        self.workdir = workdir
        self.seed = seed
        self.subnet = free_subnet()
        hosts = list(self.subnet.hosts())
        self.host_ip = str(hosts[0])
        self.ip = {n: str(hosts[10 + i]) for i, n in enumerate(self.names)}
        self.wire = f"{self.tag}-wire"
        self.netem = {}
        self.state = {}

    def ns(self, name):
        return f"{self.tag}-{name}"

    def control(self, name):
        return os.path.join(self.workdir, f"netem-{name}.json")

    def stats_file(self, name):
        return os.path.join(self.workdir, f"netem-{name}.stats")

    def up(self):
        wire, plen = self.wire, self.subnet.prefixlen
        sh("ip", "netns", "add", wire)
        sh("ip", "-n", wire, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", wire, "link", "set", "br0", "up")
        # Bridged IPv4 packets pass the wire's iptables (as they would a
        # router's), where each namespace's port is sent to its netem.
        sh("ip", "netns", "exec", wire, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
        host_end = f"{self.tag}h"
        sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "host", "netns", wire)
        sh("ip", "addr", "add", f"{self.host_ip}/{plen}", "dev", host_end)
        sh("ip", "link", "set", host_end, "up")
        sh("ip", "-n", wire, "link", "set", "host", "master", "br0")
        sh("ip", "-n", wire, "link", "set", "host", "up")
        for i, name in enumerate(self.names):
            ns, port = self.ns(name), f"p{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", wire, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", wire, "link", "set", port, "master", "br0")
            sh("ip", "-n", wire, "link", "set", port, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip[name]}/{plen}", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "route", "add", "default", "via", self.host_ip)
            # Both ways through this port go to queue i; with no netem
            # listening (before it starts, after it ends) they pass.
            for way in ("--physdev-in", "--physdev-out"):
                sh("ip", "netns", "exec", wire, "iptables-legacy", "-t", "mangle", "-A", "FORWARD",
                   "-m", "physdev", way, port, "-j", "NFQUEUE", "--queue-num", str(i), "--queue-bypass")
            self.set(name)
            self.netem[name] = subprocess.Popen(
                ["ip", "netns", "exec", wire, sys.executable, os.path.join(HERE, "netem.py"),
                 "--queue", str(i), "--local-ip", self.ip[name], "--control", self.control(name),
                 "--stats", self.stats_file(name), "--seed", str(self.seed + i)],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.workdir, f"netem-{name}.log"), "ab"))
        # The netems are bound once each has written its first counts.
        deadline = time.time() + 15
        while not all(os.path.exists(self.stats_file(n)) for n in self.names):
            if time.time() > deadline or any(p.poll() is not None for p in self.netem.values()):
                raise RuntimeError(f"a netem did not start (logs in {self.workdir}/netem-*.log)")
            time.sleep(0.1)

    def set(self, name, delay_ms=(0, 0), loss=0.0, block=()):
        """This namespace's faults from now on (see bench/netem.py)."""
        rule = {"delay_ms": list(delay_ms), "loss": loss, "block": sorted(set(block))}
        self.state[name] = rule
        tmp = self.control(name) + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rule, f)
        os.replace(tmp, self.control(name))

    def exec_prefix(self, name):
        return ["ip", "netns", "exec", self.ns(name)]

    def netem_alive(self):
        return {n: p.poll() is None for n, p in self.netem.items()}

    def stats(self):
        out = {}
        for n in self.names:
            try:
                with open(self.stats_file(n)) as f:
                    out[n] = json.load(f)
            except (OSError, ValueError):
                out[n] = {}
        return out

    def down(self):
        """Removes everything this run made; safe to call twice."""
        for p in self.netem.values():
            if p.poll() is None:
                p.terminate()
        for p in self.netem.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        remove_run(self.tag)


if __name__ == "__main__":
    if sys.argv[1:] != ["cleanup"]:
        raise SystemExit("usage: netns.py cleanup   (removes what a killed network chaos run left behind)")
    cleanup_stale()
