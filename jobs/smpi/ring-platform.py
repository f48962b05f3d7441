#!/usr/bin/env python3
"""Writes a SimGrid platform: N hosts in a ring, each joined to the next by its
own full-duplex link (a ring network, like a chain of point-to-point or peer
links), rather than one NIC per host into a switch.

    jobs/smpi/ring-platform.py [--hosts 4096] [--bw 10Gbps] [--lat 1us] > FILE.xml

Only neighbours have routes of their own; other pairs are routed along the
ring by SimGrid (DijkstraCache), so algorithms that talk to far ranks share
links, as they would on such a network. For a sweep:

    jobs/smpi/ring-platform.py > runs/ring-10g.xml
    jobs/smpi/sweep.sh --platform runs/ring-10g.xml --algo lp,ring,mst
"""
import argparse

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--hosts", type=int, default=4096)
ap.add_argument("--bw", default="10Gbps")
ap.add_argument("--lat", default="1us")
a = ap.parse_args()
if a.hosts < 2:
    ap.error("--hosts must be at least 2")

out = ["<?xml version='1.0'?>",
       '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
       f"<!-- {a.hosts} hosts in a ring; host i and i+1 share link l-i "
       f"({a.bw}, {a.lat}, full duplex). Written by jobs/smpi/ring-platform.py. -->",
       '<platform version="4.1">',
       '  <zone id="ring" routing="DijkstraCache">']
out += [f'    <host id="node-{i}" speed="1Gf"/>' for i in range(a.hosts)]
out += [f'    <link id="l-{i}" bandwidth="{a.bw}" latency="{a.lat}" sharing_policy="SPLITDUPLEX"/>'
        for i in range(a.hosts)]
for i in range(a.hosts):
    j = (i + 1) % a.hosts
    if j == i or (a.hosts == 2 and i == 1):
        continue  # two hosts: one link between them
    out.append(f'    <route src="node-{i}" dst="node-{j}" symmetrical="NO">'
               f'<link_ctn id="l-{i}" direction="UP"/></route>')
    out.append(f'    <route src="node-{j}" dst="node-{i}" symmetrical="NO">'
               f'<link_ctn id="l-{i}" direction="DOWN"/></route>')
out += ["  </zone>", "</platform>"]
print("\n".join(out))
