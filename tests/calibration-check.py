#!/usr/bin/env python3
"""calibration-check.py ARACHNE_PLAN FILE... - price each published run of
profiles/calibration/ with `arachne-plan --evaluate` and hold it to the
measurement.

A run expected "within" must be priced within +-15 % of its measured
iteration time (the tolerance is the claim, docs/costmodel.md); one
expected "refused" is one the model cannot express, and must be refused
by the memory check, naming the memory.  Prints one line a run and exits
1 when any run misses.
"""
import json
import os
import subprocess
import sys
import tempfile

TOLERANCE = 0.15


def main():
    prog, files = sys.argv[1], sys.argv[2:]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            doc = json.load(open(path))
            name = doc["name"]
            cluster = os.path.join(tmp, name + ".cluster.json")
            plan = os.path.join(tmp, name + ".plan.json")
            json.dump(doc["cluster"], open(cluster, "w"))
            json.dump(doc["plan"], open(plan, "w"))
            res = subprocess.run([prog, "--evaluate", plan, "--model",
                                  doc["run"]["model"], "--cluster", cluster,
                                  "--format", "json"],
                                 capture_output=True, text=True)
            measured = doc["measured"]["iter_s"]
            if doc["expect"] == "refused":
                ok = res.returncode == 1 and "GiB of" in res.stderr
                print("%-26s measured %8.3f s  refused as expected: %s" %
                      (name, measured, ok and "yes" or
                       "no (%d: %s)" % (res.returncode, res.stderr.strip())))
            elif res.returncode != 0:
                ok = False
                print("%-26s not priced: %s" % (name, res.stderr.strip()))
            else:
                got = json.loads(res.stdout)["predicted"]["iter_s"]
                err = got / measured - 1
                ok = abs(err) <= TOLERANCE
                print("%-26s measured %8.3f s  predicted %8.3f s  %+6.1f %%%s" %
                      (name, measured, got, 100 * err,
                       "" if ok else "  OUTSIDE +-15 %"))
            failed += not ok
    return 1 if failed else 0


sys.exit(main())
