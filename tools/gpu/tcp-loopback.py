# tcp-loopback.py: raw single-stream TCP throughput over loopback on this machine, with no
# Remora and no GPU: the ceiling for the TCP transport's bulk copies (kernel copies each byte
# twice). gpu-session.sh prints it beside remora-bench's table.
import socket, threading, time
N = 4 << 20; TOTAL = 4 << 30
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
def rx():
    c, _ = srv.accept(); buf = bytearray(N); mv = memoryview(buf); got = 0
    while got < TOTAL:
        n = c.recv_into(mv); got += n
        if n == 0: break
    c.close()
t = threading.Thread(target=rx); t.start()
s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
data = bytes(N); t0 = time.time(); sent = 0
while sent < TOTAL:
    s.sendall(data); sent += N
s.close(); t.join(); dt = time.time() - t0
print("raw TCP loopback, one stream, 4 MiB writes: %.2f GB/s" % (TOTAL / dt / 1e9))
