"""notify.py SOCKET COUNT: play systemd's side of sd_notify(3).

Binds a datagram socket at SOCKET and prints each of COUNT messages that
arrive, one line each, then exits (or after 20 s).
"""
import socket
import sys

s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(20)
print("bound", flush=True)
for _ in range(int(sys.argv[2])):
    print(s.recv(4096).decode(), flush=True)
