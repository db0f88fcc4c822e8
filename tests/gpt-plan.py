#!/usr/bin/env python3
"""gpt-plan.py - write a plan JSON for arachne-gpt's tests from a short spec.

    gpt-plan.py --cluster C.json --mbs B [--batch G] [--model M]
                [--set KEY=JSON ...] TEMPLATE...

A TEMPLATE is  MICRO_BATCHES:REPLICA[+REPLICA...], a REPLICA is
STAGE[/STAGE...], and a STAGE is NODE:GPU[,GPU...]:FIRST-LAST, the GPUs of
its TP group and its layers.  Every replica of a template must have the same
stages (TP degrees and layers).  Example, two stages of TP 2 and 1 on node n0:

    gpt-plan.py --cluster c.json --mbs 2 '8:n0:0,1:0-4/n0:2:5-9'
"""
import argparse
import json
import sys


def parse_stage(text, gpu_of):
    node, gpus, layers = text.split(":")
    first, last = (int(x) for x in layers.split("-"))
    return {"node": node, "gpus": [int(g) for g in gpus.split(",")],
            "gpu": gpu_of[node], "layers": [first, last]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--mbs", type=int, required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--model", default="gpt-tiny")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="a top-level key of the plan (recompute, ...)")
    ap.add_argument("templates", nargs="+")
    a = ap.parse_args()
    with open(a.cluster) as f:
        cluster = json.load(f)
    gpu_of = {}
    for entry in cluster["nodes"]:
        for host in entry["hosts"].split(","):
            gpu_of[host] = entry["gpu"]
    templates = []
    for spec in a.templates:
        mb, replicas = spec.split(":", 1)
        rows = [[parse_stage(s, gpu_of) for s in r.split("/")]
                for r in replicas.split("+")]
        shape = [(len(s["gpus"]), s["layers"], s["gpu"]) for s in rows[0]]
        for r in rows:
            if [(len(s["gpus"]), s["layers"], s["gpu"]) for s in r] != shape:
                sys.exit("gpt-plan.py: replicas of %s differ" % spec)
        templates.append({
            "replicas": len(rows), "micro_batches": int(mb),
            "stages": [{"gpu": g, "tp": tp, "layers": layers, "ep": 1,
                        "etp": 1, "edp": tp * len(rows)}
                       for tp, layers, g in shape],
            "placement": [[{"node": s["node"], "gpus": s["gpus"]}
                           for s in r] for r in rows],
        })
    plan = {"arachne_plan": 1, "model": a.model, "global_batch": a.batch,
            "seq_len": a.seq_len, "micro_batch": a.mbs,
            "templates": templates}
    for kv in a.set:
        key, value = kv.split("=", 1)
        plan[key] = json.loads(value)
    json.dump(plan, sys.stdout, indent=1)
    print()


main()
