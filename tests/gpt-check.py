#!/usr/bin/env python3
"""gpt-check.py - checks on arachne-gpt's output for the system tests.

    gpt-check.py losses RUN.out REFERENCE.out [TOLERANCE]
        Both print the same steps ("step K loss X"), every loss within
        TOLERANCE (default 1e-5) relative of the reference.
    gpt-check.py comms PLAN.json CLUSTER.json TRACE
        Every communicator the trainer made (ARACHNE_GPT_TRACE=1 lines
        "arachne-gpt: rank R: comm tp|sync A,B,...") is one of the plan's
        groups, computed here independently of the trainer: a stage's TP
        group, or the ranks that hold one unit of one layer (one per
        pipeline; the token embedding's unit over the holders of the
        embedding and of the head), and every rank made every group of
        two or more that it is in.
"""
import json
import re
import sys

UNITS = 4       # gpt-tiny: 4 heads
LAYERS = 10     # embedding, 8 blocks, head


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = re.fullmatch(r"step (\d+) loss (\S+)\n?", line)
            if not m:
                sys.exit("%s: not a step line: %r" % (path, line))
            out[int(m.group(1))] = float(m.group(2))
    return out


def check_losses(run, ref, tol=1e-5):
    a, b = losses(run), losses(ref)
    if sorted(a) != sorted(b) or not a:
        sys.exit("steps differ: %s has %s, %s has %s" %
                 (run, sorted(a), ref, sorted(b)))
    worst = max(abs(a[k] - b[k]) / abs(b[k]) for k in b)
    print("%d steps, largest relative difference %.3g" % (len(b), worst))
    if worst > tol:
        for k in sorted(b):
            print("step %d: %.9f vs %.9f" % (k, a[k], b[k]))
        sys.exit("losses differ by more than %g" % tol)


def cluster_gpus(cluster):
    gpus = []
    for entry in cluster["nodes"]:
        for host in entry["hosts"].split(","):
            gpus += [(host, g) for g in range(entry["gpus_per_node"])]
    return {gpu: rank for rank, gpu in enumerate(gpus)}


def plan_groups(plan, rank_of):
    tp_groups, holders = set(), {}
    for t in plan["templates"]:
        for row in t["placement"]:
            for stage, place in zip(t["stages"], row):
                ranks = [rank_of[(place["node"], g)] for g in place["gpus"]]
                tp = len(ranks)
                if tp > 1:
                    tp_groups.add(tuple(sorted(ranks)))
                first, last = stage["layers"]
                for layer in range(first, last + 1):
                    for u in range(UNITS):
                        holders.setdefault((layer, u), set()).add(
                            ranks[u * tp // UNITS])
    sync = {tuple(sorted(v)) for v in holders.values()}
    for u in range(UNITS):
        sync.add(tuple(sorted(holders[(0, u)] | holders[(LAYERS - 1, u)])))
    return tp_groups, {s for s in sync if len(s) > 1}


def check_comms(plan_path, cluster_path, trace_path):
    with open(plan_path) as f:
        plan = json.load(f)
    with open(cluster_path) as f:
        rank_of = cluster_gpus(json.load(f))
    tp_groups, sync_groups = plan_groups(plan, rank_of)
    made = set()
    with open(trace_path) as f:
        for line in f:
            m = re.match(r"arachne-gpt: rank (\d+): comm (tp|sync) ([\d,]+)$",
                         line.strip())
            if not m:
                continue
            rank, kind = int(m.group(1)), m.group(2)
            members = tuple(sorted(int(x) for x in m.group(3).split(",")))
            allowed = tp_groups if kind == "tp" else sync_groups
            if members not in allowed or rank not in members:
                sys.exit("rank %d made a %s communicator %s that is no group of the plan"
                         % (rank, kind, members))
            made.add((rank, kind, members))
    want = {(r, "tp", g) for g in tp_groups for r in g} | \
           {(r, "sync", g) for g in sync_groups for r in g}
    if made != want:
        sys.exit("missing communicators: %s" % sorted(want - made))
    print("%d communicators, all of them plan groups" % len(made))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "losses":
        check_losses(sys.argv[2], sys.argv[3],
                     float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5)
    elif len(sys.argv) == 5 and sys.argv[1] == "comms":
        check_comms(*sys.argv[2:])
    else:
        sys.exit(__doc__)


main()
