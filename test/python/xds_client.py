"""A proxyless gRPC client (gRPC C-core through Debian's python3-grpcio) for Trellis's tests.

Run with /usr/bin/python3 and GRPC_XDS_BOOTSTRAP pointing at an xDS bootstrap file. The
channel dials the target given as the first argument (xds:///<svc>.<ns>:<port>) and stays
open; every line read from stdin is a JSON command, answered by one JSON line on stdout:

  {"n": 200, "timeout": 5, "wait_for_ready": false, "method": "/pkg.Svc/Method"}
  -> {"counts": {"<reply>": k, ...}, "errors": {"UNAVAILABLE": k, ...}}

Requests and replies are raw bytes (no serializers), so no generated code is needed; each
backend replies with its own name. RPCs of a command run concurrently (futures).
"""
import json
import sys

import grpc


def run(channel, command):
    stub = channel.unary_unary(command.get("method", "/trellis.test.Greeter/Hello"))
    futures = [
        stub.future(b"", timeout=command.get("timeout", 5), wait_for_ready=command.get("wait_for_ready", False))
        for _ in range(command.get("n", 1))
    ]
    counts, errors = {}, {}
    for f in futures:
        try:
            name = f.result().decode()
            counts[name] = counts.get(name, 0) + 1
        except grpc.RpcError as err:
            code = err.code().name
            errors[code] = errors.get(code, 0) + 1
    return {"counts": counts, "errors": errors}


def main():
    target = sys.argv[1]
    with grpc.insecure_channel(target) as channel:
        print(json.dumps({"ready": True, "grpc": grpc.__version__}), flush=True)
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            print(json.dumps(run(channel, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
