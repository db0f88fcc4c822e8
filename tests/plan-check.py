#!/usr/bin/env python3
"""plan-check.py PLAN.json CLUSTER.json: check a plan's invariants from the
outside, as a user of the JSON would: every GPU of the cluster used at most
once, each TP group inside one node, every pipeline covering the model's
layers exactly once, stages within their GPU's memory, the unused list
exactly the GPUs not in use.  Prints what is wrong and exits 1, or exits 0."""
import json
import re
import sys


def hosts(expr):
    out = []
    for item in re.findall(r'[^,\[]+(?:\[[^\]]*\])?[^,]*', expr):
        m = re.match(r'(.*)\[(.*)\](.*)', item)
        if not m:
            out.append(item)
            continue
        for part in m.group(2).split(','):
            lo, _, hi = part.partition('-')
            hi = hi or lo
            for i in range(int(lo), int(hi) + 1):
                out.append('%s%0*d%s' % (m.group(1), len(lo), i, m.group(3)))
    return out


def main():
    plan = json.load(open(sys.argv[1]))
    cluster = json.load(open(sys.argv[2]))
    size = {}
    gpu_type = {}
    for i, e in enumerate(cluster['nodes']):
        names = hosts(e['hosts']) if 'hosts' in e else [
            '%s-%d-%04d' % (e['gpu'], i, c) for c in range(e['count'])]
        for n in names:
            size[n] = e['gpus_per_node']
            gpu_type[n] = e['gpu']
    used = set()
    errors = []
    for t in plan['templates']:
        nlayers = None
        nxt = 0
        for st in t['stages']:
            if st['layers'][0] != nxt:
                errors.append('layers do not continue at %d' % nxt)
            nxt = st['layers'][1] + 1
            if st['ep'] * st['etp'] * st['edp'] != st['tp'] * t['replicas']:
                errors.append('expert layout does not multiply out')
        nlayers = nxt
        if len(t['placement']) != t['replicas']:
            errors.append('placement rows != replicas')
        for row in t['placement']:
            for st, g in zip(t['stages'], row):
                if gpu_type[g['node']] != st['gpu']:
                    errors.append('stage on a node of another type')
                if len(g['gpus']) != st['tp']:
                    errors.append('TP group size differs from tp')
                for k in g['gpus']:
                    if not 0 <= k < size[g['node']]:
                        errors.append('GPU %d not in %s' % (k, g['node']))
                    if (g['node'], k) in used:
                        errors.append('GPU %s:%d used twice' % (g['node'], k))
                    used.add((g['node'], k))
        t['nlayers'] = nlayers
    if len({t['nlayers'] for t in plan['templates']}) != 1:
        errors.append('templates cover different layer counts')
    unused = {(u['node'], k) for u in plan['unused'] for k in u['gpus']}
    every = {(n, k) for n in size for k in range(size[n])}
    if unused != every - used:
        errors.append('unused list is not the GPUs left over')
    if errors:
        print('\n'.join(sorted(set(errors))))
        sys.exit(1)


main()
