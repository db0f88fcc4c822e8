"""client.py SOCKET SCENARIO: misbehaving plannerd clients for t0602.

Each scenario prints what it saw, one fact a line, for the test to grep.
"""
import json
import socket
import sys
import time

path, scenario = sys.argv[1], sys.argv[2]


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def answer(s, timeout=10):
    s.settimeout(timeout)
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            return None
        buf += chunk
    return json.loads(buf)


def ping_ok():
    s = connect()
    s.sendall(b'{"op":"ping"}\n')
    return answer(s)["ok"]


def closed(s):
    """The daemon closed (a reset: it dropped input it did not read)."""
    try:
        return "closed" if s.recv(1) == b"" else "open"
    except ConnectionResetError:
        return "closed"


def code(a):
    return a["error"]["code"] if a and not a["ok"] else ("ok" if a else "eof")


if scenario == "malformed":
    s = connect()
    for line in [b"{bad json\n", b"[1,2]\n", b'{"op":"ping","op":"x"}\n',
                 b'{"op":"ping"}\n']:
        s.sendall(line)
        print(code(answer(s)))

elif scenario == "oversize":
    # 8 KiB without a newline against max_request_bytes = 4096
    s = connect()
    s.sendall(b'{"op":"ping","id":"' + b"x" * 8192)
    print(code(answer(s)))
    print(closed(s))
    # just under the limit is fine
    s = connect()
    s.sendall(b'{"op":"ping","id":"' + b"x" * 4000 + b'"}\n')
    print(code(answer(s)))

elif scenario == "stall":
    # half a line, then silence; others are served meanwhile
    s = connect()
    s.sendall(b'{"op":"pi')
    t0 = time.time()
    print("other", "ok" if ping_ok() else "failed")
    print("other-fast", time.time() - t0 < 0.5)
    a = answer(s, timeout=10)
    waited = time.time() - t0
    print(code(a))
    print("waited", 0.8 < waited < 5)
    print(closed(s))

elif scenario == "leave":
    # 2,000 answers requested and never read, then gone mid-answer
    s = connect()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(b'{"op":"status"}\n' * 2000)
    time.sleep(0.5)
    s.close()
    time.sleep(0.2)
    print("after", "ok" if ping_ok() else "failed")

elif scenario == "loris":
    # N clients that each send a ping one byte at a time, 0.25 s apart:
    # 3.5 s a request against client_timeout_s = 1.  Each must be cut
    # off within the timeout of its first byte, however it trickles.
    import threading
    n = int(sys.argv[3])
    line = b'{"op":"ping"}\n'
    results = [None] * n

    def trickle(k):
        s = connect()
        t0 = time.time()
        try:
            for byte in line:
                s.sendall(bytes([byte]))
                time.sleep(0.25)
                s.settimeout(0)
                try:
                    if s.recv(1, socket.MSG_PEEK) == b"":
                        break
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        a = None
        try:
            a = answer(s, timeout=10)
        except (ConnectionResetError, OSError, ValueError):
            pass
        results[k] = (code(a), time.time() - t0)

    threads = [threading.Thread(target=trickle, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    # While they hold every slot, and once they are gone: a ping is
    # served within the timeout (plus a margin), not after 3.5 s.
    time.sleep(0.3)
    t0 = time.time()
    while True:
        try:
            if ping_ok():
                break
        except (ConnectionResetError, BrokenPipeError, TypeError):
            pass
        if time.time() - t0 > 10:
            break
        time.sleep(0.1)
    print("other served", time.time() - t0 < 2.5)
    for t in threads:
        t.join()
    for c, took in results:
        print(c, "cut on time" if took < 2.5 else "cut after %.1f s" % took)

elif scenario == "hold":
    # keep N idle connections open until stdin closes
    conns = [connect() for _ in range(int(sys.argv[3]))]
    print("holding", len(conns), flush=True)
    sys.stdin.read()
