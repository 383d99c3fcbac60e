"""A gRPC C-core (Python grpcio) proxyless xDS client driven over stdio by
the Go end-to-end tests, with the same protocol as ../grpcjs/client.js.

    GRPC_XDS_BOOTSTRAP=bootstrap.json /usr/bin/python3 client.py xds:///chat

Each stdin line is a JSON command
  {"calls": [["k1", "v1", ...], [], ...], "deadline_ms": 10000, "concurrency": 32}
that sends one grpc.testing.TestService/UnaryCall per entry of calls,
carrying that entry's metadata pairs, with wait_for_ready. Its answer is one
stdout line
  {"ids": ["replica-0", ""], "errors": ["", "DEADLINE_EXCEEDED: ..."]}
in the order of calls. Logs go to stderr only; it exits when stdin closes.
It needs nothing but grpcio: messages are encoded by hand.
"""

import json
import sys
import threading

import grpc

METHOD = "/grpc.testing.TestService/UnaryCall"


def server_id(data):
    """Field 4 (string server_id) of a grpc.testing.SimpleResponse."""
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(data, i)
        elif wire == 2:
            n, i = varint(data, i)
            if field == 4:
                return data[i:i + n].decode()
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return ""


def varint(data, i):
    out, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def main():
    if len(sys.argv) < 2:
        print("usage: client.py TARGET", file=sys.stderr)
        sys.exit(2)
    channel = grpc.insecure_channel(sys.argv[1])
    call = channel.unary_unary(METHOD, request_serializer=lambda _: b"", response_deserializer=server_id)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            out = run(call, json.loads(line))
        except Exception as e:  # the Go side fails the test with it
            out = {"ids": [], "errors": [], "fatal": repr(e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    channel.close()


def run(call, cmd):
    calls = cmd.get("calls") or []
    deadline = (cmd.get("deadline_ms") or 10000) / 1000.0
    ids, errors = [""] * len(calls), [""] * len(calls)
    slots = threading.Semaphore(max(1, cmd.get("concurrency") or 32))
    done = threading.Event()
    left = [len(calls)]
    lock = threading.Lock()

    def finish(i, fut):
        try:
            ids[i] = fut.result()
        except grpc.RpcError as e:
            errors[i] = "%s: %s" % (e.code().name, e.details())
        except Exception as e:
            errors[i] = "INTERNAL: %r" % e
        slots.release()
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    if not calls:
        return {"ids": ids, "errors": errors}
    for i, pairs in enumerate(calls):
        slots.acquire()
        md = [(str(pairs[j]).lower(), str(pairs[j + 1])) for j in range(0, len(pairs) - 1, 2)]
        fut = call.future(b"", timeout=deadline, metadata=md, wait_for_ready=True)
        fut.add_done_callback(lambda f, i=i: finish(i, f))
    done.wait()
    return {"ids": ids, "errors": errors}


if __name__ == "__main__":
    main()
