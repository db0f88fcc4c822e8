#!/usr/bin/env python3
"""spank-plan-check.py - checks for the arachne.so end-to-end tests.

  spank-plan-check.py gpus PLAN
      print "node:gpu" for every GPU the plan places or lists as unused,
      sorted; fail if a GPU appears twice.
  spank-plan-check.py roles PLAN TASKS
      TASKS has one line per task: "NODE LOCALID VAR=VALUE ..." with the
      task's ARACHNE_* variables.  Fail unless every task's role is the one
      the plan gives the GPU it drives (the LOCALID-th of its node), and
      every placed GPU of those nodes is driven by a task.
  spank-plan-check.py ask SOCKET REQUEST
      send one request line to plannerd and print its answer line.
"""
import json
import sys


def placed(plan):
    """Yield (node, gpu, role) for every placed GPU."""
    templates = plan["templates"]
    dp_size = sum(t["replicas"] for t in templates)
    dp = 0
    for ti, t in enumerate(templates):
        for rep, row in enumerate(t["placement"]):
            for s, e in enumerate(row):
                st = t["stages"][s]
                for j, g in enumerate(e["gpus"]):
                    tp = st.get("tp", 1)
                    yield e["node"], g, {
                        "ARACHNE_ROLE": "worker",
                        "ARACHNE_TEMPLATE": str(ti),
                        "ARACHNE_STAGE": str(s),
                        "ARACHNE_PP_RANK": str(s),
                        "ARACHNE_PP_SIZE": str(len(t["stages"])),
                        "ARACHNE_TP_RANK": str(j % tp),
                        "ARACHNE_TP_SIZE": str(tp),
                        "ARACHNE_DP_RANK": str(dp + rep),
                        "ARACHNE_DP_SIZE": str(dp_size),
                        "ARACHNE_LAYERS": "%d-%d" % tuple(st["layers"]),
                        "ARACHNE_EP": str(st.get("ep", 1)),
                        "ARACHNE_ETP": str(st.get("etp", 1)),
                        "ARACHNE_EDP": str(st.get("edp", 1)),
                        "ARACHNE_RDZV_NODE": row[0]["node"],
                    }
        dp += t["replicas"]


def cmd_gpus(plan):
    seen = [(n, g) for n, g, _ in placed(plan)]
    for u in plan.get("unused", []):
        seen += [(u["node"], g) for g in u["gpus"]]
    if len(seen) != len(set(seen)):
        sys.exit("a GPU appears twice in the plan: %s" % sorted(seen))
    for n, g in sorted(seen):
        print("%s:%d" % (n, g))


def cmd_roles(plan, tasks_path):
    want = {(n, g): r for n, g, r in placed(plan)}
    driven = set()
    nodes = set()
    bad = 0
    for line in open(tasks_path):
        f = line.split()
        if len(f) < 2:
            continue
        node, local = f[0], int(f[1])
        nodes.add(node)
        env = dict(kv.split("=", 1) for kv in f[2:])
        exp = want.get((node, local), {"ARACHNE_ROLE": "unused"})
        for k, v in exp.items():
            if env.get(k) != v:
                print("%s task %d: %s=%s, the plan says %s" %
                      (node, local, k, env.get(k), v))
                bad += 1
        driven.add((node, local))
    for (n, g) in want:
        if n in nodes and (n, g) not in driven:
            print("%s GPU %d is placed but no task drives it" % (n, g))
            bad += 1
    if bad:
        sys.exit(1)


def cmd_ask(path, request):
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    s.sendall(request.encode() + b"\n")
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        answer += chunk
    print(answer.decode().strip())


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    if sys.argv[1] == "ask" and len(sys.argv) == 4:
        return cmd_ask(sys.argv[2], sys.argv[3])
    plan = json.load(open(sys.argv[2]))
    if sys.argv[1] == "gpus":
        cmd_gpus(plan)
    elif sys.argv[1] == "roles" and len(sys.argv) == 4:
        cmd_roles(plan, sys.argv[3])
    else:
        sys.exit(__doc__)


main()
