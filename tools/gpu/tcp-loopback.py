# tcp-loopback.py: raw single-stream TCP throughput over loopback on this machine, with no
# Remora and no GPU: the ceiling for the TCP transport's bulk copies (the kernel copies each
# byte twice). Two receivers: into one hot 4 MiB buffer (best case), and across a 64 MiB
# buffer as a 64 MiB cudaMemcpy's destination would be. gpu-session.sh prints both beside
# remora-bench's table.
import socket
import threading
import time

CHUNK = 4 << 20
TOTAL = 4 << 30


def measure(dest_bytes):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def rx():
        c, _ = srv.accept()
        view = memoryview(bytearray(dest_bytes))
        got = 0
        while got < TOTAL:
            off = got % dest_bytes
            n = c.recv_into(view[off:off + min(CHUNK, dest_bytes - off)])
            if n == 0:
                break
            got += n
        c.close()

    t = threading.Thread(target=rx)
    t.start()
    s = socket.create_connection(srv.getsockname())
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pool = [bytes(CHUNK) for _ in range(6)]  # like the worker's six 4 MiB staging chunks
    t0 = time.time()
    for i in range(TOTAL // CHUNK):
        s.sendall(pool[i % len(pool)])
    s.close()
    t.join()
    srv.close()
    return TOTAL / (time.time() - t0) / 1e9


print("raw TCP loopback, one stream: %.2f GB/s into a hot 4 MiB buffer, %.2f GB/s across 64 MiB"
      % (measure(CHUNK), measure(64 << 20)))
