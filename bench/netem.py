#!/usr/bin/env python3
"""A small netem in user space, for the network chaos run (bench/netns.py).

Some kernels are built without sch_netem (and without loadable modules), so
`tc qdisc add ... netem` cannot be used. This program gives the same faults
through an NFQUEUE instead: iptables, in the namespace that holds the bridge
(the "wire"), sends every IPv4 packet to or from one namespace's veth port
to a queue; this program, running in the wire, holds each packet for a
random delay, drops a share of them at random, and drops every packet to or
from a blocked port (a partition: the packets vanish on the wire, nobody is
told). The kernel keeps the packets; only their verdicts come from here.
Packets are held in the wire, never in their sender's namespace: a packet
held there would still count against its socket's send queue (TCP Small
Queues), and a sender would slow down as on no real link. Crossing a veth
into another namespace detaches a packet from its socket (netem orphans its
packets for the same reason).

What it does is read from a JSON control file, re-read when it changes:

    {"delay_ms": [25, 150], "loss": 0.05, "block": [6380, 5433]}

- delay_ms: how long a packet waits, in each direction: each direction's
  delay is drawn afresh every 100 ms, uniformly in [lo, hi] (a path whose
  delay wanders, rather than packets that overtake each other). Packets of
  one TCP or UDP flow keep their order: when the delay drops, a packet still
  leaves after the one before it, as from a queue draining.
- loss: the chance that a packet is dropped (each packet on its own).
- block: remote ports; every packet to one (outgoing) or from one (incoming)
  is dropped while it is listed.

Counts (packets seen, delayed, lost, dropped by a partition, the most held at
once) are written to --stats as JSON once a second and at exit.

usage: netem.py --queue N --local-ip A --control FILE --stats FILE [--seed S]
"""
import argparse
import errno
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import time

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_PACKET = 2
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 1, 4
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD = 1, 2, 10
NF_DROP, NF_ACCEPT = 0, 1
COPY_RANGE = 64  # enough for an IPv4 header with options and the ports
QUEUE_MAXLEN = 50_000


def attr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def message(kind, queue, attrs, flags=NLM_F_REQUEST, seq=0):
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue) + b"".join(attrs)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


class Queue:
    def __init__(self, num):
        self.num = num
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE (root)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
        self.sock.bind((0, 0))
        self.configure([attr(NFQA_CFG_CMD, struct.pack("=BB", NFQNL_CFG_CMD_BIND, 0) + struct.pack("!H", 0))], 1)
        self.configure([attr(NFQA_CFG_PARAMS, struct.pack("!IB", COPY_RANGE, NFQNL_COPY_PACKET)),
                        attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))], 2)
        flags = struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)
        self.configure([attr(NFQA_CFG_MASK, flags), attr(NFQA_CFG_FLAGS, flags)], 3)
        self.sock.setblocking(False)

    def configure(self, attrs, seq):
        self.sock.send(message(NFQNL_MSG_CONFIG, self.num, attrs, NLM_F_REQUEST | NLM_F_ACK, seq))
        data = self.sock.recv(65536)
        length, kind = struct.unpack_from("=IH", data)
        if kind == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", data, 16)
            if err:
                raise SystemExit(f"netem: configuring queue {self.num} failed: {os.strerror(-err)}")

    def packets(self):
        """(packet id, hook, first bytes) of every packet waiting on the socket."""
        out = []
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                return out
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    continue
                raise
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if length < 16:
                    break
                if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                    pid, hook, payload = None, None, b""
                    a = off + 20
                    while a + 4 <= off + length:
                        alen, atype = struct.unpack_from("=HH", data, a)
                        if alen < 4:
                            break
                        atype &= 0x3FFF
                        if atype == NFQA_PACKET_HDR:
                            pid, _, hook = struct.unpack_from("!IHB", data, a + 4)
                        elif atype == NFQA_PAYLOAD:
                            payload = data[a + 4:a + alen]
                        a += (alen + 3) & ~3
                    if pid is not None:
                        out.append((pid, hook, payload))
                off += (length + 3) & ~3

    def verdicts(self, pairs):
        msgs = [message(NFQNL_MSG_VERDICT, self.num, [attr(NFQA_VERDICT_HDR, struct.pack("!II", v, pid))])
                for pid, v in pairs]
        # Several verdicts per datagram; netlink takes each message in turn.
        for i in range(0, len(msgs), 200):
            self.sock.send(b"".join(msgs[i:i + 200]))


def flow_of(local, payload):
    """(flow key, remote port, outgoing?) of an IPv4 packet to or from
    address `local` (4 bytes); (None, None, False) for anything else."""
    if len(payload) < 20 or payload[0] >> 4 != 4:
        return None, None, False
    ihl = (payload[0] & 15) * 4
    proto = payload[9]
    if proto in (6, 17) and len(payload) >= ihl + 4:
        sport, dport = struct.unpack_from("!HH", payload, ihl)
    else:
        sport = dport = 0
    src, dst = payload[12:16], payload[16:20]
    key = (proto, src, dst, sport, dport)
    return key, (dport if src == local else sport), src == local


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queue", type=int, default=0)
    ap.add_argument("--local-ip", required=True, help="the namespace's address: tells out from in")
    ap.add_argument("--control", required=True)
    ap.add_argument("--stats", required=True)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    local = socket.inet_aton(args.local_ip)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))

    q = Queue(args.queue)
    rule = {"delay_ms": [0, 0], "loss": 0.0, "block": []}
    control_mtime = None
    stats = {"seen": 0, "delayed": 0, "lost": 0, "partitioned": 0, "max_held": 0}
    current = {True: 0.0, False: 0.0}  # the delay now, outgoing and incoming (seconds)
    next_draw = 0.0
    held = []  # heap of (due, seq, packet id)
    last_due = {}  # flow -> due of its latest packet (keeps a flow in order)
    seq = 0
    next_chores = 0.0

    def write_stats():
        tmp = args.stats + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(stats, held=len(held)), f)
        os.replace(tmp, args.stats)

    while not stopping:
        now = time.monotonic()
        if now >= next_chores:
            next_chores = now + 0.1
            try:
                m = os.stat(args.control).st_mtime_ns
                if m != control_mtime:
                    with open(args.control) as f:
                        rule = dict(rule, **json.load(f))
                    control_mtime = m
            except (OSError, ValueError):
                pass
            if int(now) != int(now - 0.1):
                write_stats()
                last_due = {k: d for k, d in last_due.items() if d > now}
        wait = min(0.1, max(0.0, held[0][0] - now)) if held else 0.1
        try:
            select.select([q.sock], [], [], wait)
        except InterruptedError:
            pass
        lo, hi = rule["delay_ms"]
        block = set(rule["block"])
        out = []
        now = time.monotonic()
        if now >= next_draw:
            next_draw = now + 0.1
            for way in current:
                current[way] = rng.uniform(lo, hi) / 1000
        for pid, hook, payload in q.packets():
            stats["seen"] += 1
            flow, remote, outgoing = flow_of(local, payload)
            if remote is not None and remote in block:
                stats["partitioned"] += 1
                out.append((pid, NF_DROP))
            elif rule["loss"] and rng.random() < rule["loss"]:
                stats["lost"] += 1
                out.append((pid, NF_DROP))
            elif hi <= 0:
                out.append((pid, NF_ACCEPT))
            else:
                due = now + current[outgoing]
                if flow is not None:
                    due = max(due, last_due.get(flow, 0.0))
                    last_due[flow] = due
                seq += 1
                heapq.heappush(held, (due, seq, pid))
                stats["delayed"] += 1
        stats["max_held"] = max(stats["max_held"], len(held))
        while held and held[0][0] <= now:
            out.append((heapq.heappop(held)[2], NF_ACCEPT))
        if out:
            q.verdicts(out)
    # Let what is held go (the path heals as the program ends).
    q.verdicts([(pid, NF_ACCEPT) for _, _, pid in held])
    held.clear()
    write_stats()


if __name__ == "__main__":
    main()
