"""hold.py SOCKET PID: keep one connection open across a SIGHUP.

Sends a ping, sets budget_s to 2.5 in ./plannerd.conf, sends SIGHUP to PID,
waits for the reload, and pings again on the same connection.  Prints
"before ok" and "after ok" when both answers are ok.
"""
import json
import os
import signal
import socket
import sys
import time

sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
sock.connect(sys.argv[1])
f = sock.makefile("rwb")


def ping(tag):
    f.write(b'{"op":"ping"}\n')
    f.flush()
    answer = json.loads(f.readline())
    print(tag, "ok" if answer["ok"] else "failed")


ping("before")
with open("plannerd.conf") as conf:
    text = conf.read()
with open("plannerd.conf", "w") as conf:
    conf.write(text.replace("budget_s = 5.0;", "budget_s = 2.5;"))
os.kill(int(sys.argv[2]), signal.SIGHUP)
time.sleep(0.5)
ping("after")
