"""Serve one OpenStack WSGI application on a loopback port, one thread per request.

Run by Debian's /usr/bin/python3 (the OpenStack packages are its modules, not the
virtualenv's): `python3 wsgi_runner.py MODULE:FACTORY PORT`. The factory builds the
application from the configuration its environment names (OS_KEYSTONE_CONFIG_FILES,
OS_PLACEMENT_CONFIG_DIR). wsgiref serves it: the packaged uwsgi/apache set-ups are what a
site runs, and none of them is needed to answer the API here.
"""

import importlib
import socketserver
import sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass  # the service logs each request itself


def main() -> None:
    target, port = sys.argv[1], int(sys.argv[2])
    del sys.argv[1:]  # the applications parse the command line as their own options
    module_name, factory_name = target.split(":")
    app = getattr(importlib.import_module(module_name), factory_name)()
    server = make_server("127.0.0.1", port, app, ThreadingServer, QuietHandler)
    print(f"serving {target} on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
