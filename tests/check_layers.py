#!/usr/bin/python3
"""The core's layers go one way: a file includes only headers of its own layer or below,
and no include loops (a family of files behind one public header aside); the transport
includes no HTTP header. A module sees the module interface, not the core's side of it: no
file of modules/ includes a header of CORE_ONLY.

Reads the #include "..." lines of server/ and modules/. A file's node is its name without
the extension (conn.c and conn.h are one node, `conn`); a private header stands for the
files that share it. Exits 1, saying why, when a file includes a higher layer, when the
include graph has any other loop, when a file is in no layer (add it to LAYERS below), or
when a module includes a header of the core's side.

Usage: check_layers.py [PROJECT_ROOT]
"""
import fnmatch
import os
import re
import sys

# From the bottom up. A file may include headers of its own layer or of any layer below.
LAYERS = [
    ("base", ["clock", "lf_*", "http_parse", "proxy_protocol", "http_upstream", "open_beneath",
              "out_seg", "regex", "fastcgi_record", "uwsgi_packet",
              "scgi_netstring"]),
    ("text helpers", ["strbuf", "http_params", "vars", "vars_upstream"]),
    ("configuration", ["config", "directive", "log", "site", "upstream", "resolver", "upstream_tls",
                       "upstream_lookup",
                       "tls"]),
    ("responses", ["http_response"]),
    ("periodic tick", ["timer"]),
    ("module interface", ["module", "module_*", "rewrite", "referer", "secure_link"]),
    ("modules", ["mod_*", "file_cache", "htpasswd", "keyed_hash"]),
    ("generation", ["generation"]),
    ("transport", ["conn", "conn_tls"]),
    # the end of every answer, the sources' seam; an answer read ahead of its client
    ("http services", ["http_source", "upstream_store", "http_body_stream"]),
    ("http sources", ["http_stream", "http_proxy", "http_fastcgi"]),  # late responses, a file each
    ("http", ["http_conn"]),  # the request loop
    ("listener", ["listener"]),
    ("service", ["service"]),
    ("server", ["server", "server_metrics"]),
    ("main", ["main"]),
]

# A private header is the shared inside of the files named: including it is including them.
PRIVATE = {}

# Files that are one component, a family behind one public header: the thread group and
# its strategies, a file each, sharing lf_group_internal.h. Their includes among themselves
# are the component's inside, not loops. (The module interface has no loop: module.h
# includes none of the core's side, module_chain.h; the blocks' settings, module_level.h,
# come after the chain.)
FAMILIES = {"lf_group": ("lf_group_internal", "lf_leader_followers",
                         "lf_half_sync_half_async", "lf_thread_per_connection")}
FAMILY_OF = {member: family for family, members in FAMILIES.items() for member in members}

# Loops allowed: none. (The HTTP layer's used to be one, the connection and its late
# responses calling each other: the sources' seam, http_source.h, cut it.)
ALLOWED_LOOPS = []

# Headers a layer may not include even though they are below it: the transport knows
# nothing of HTTP (the HTTP layer installs its handlers and keeps its state in a struct
# that begins with the connection).
NEVER = {"transport": ["http_*"]}

# Headers of the module interface's layer that are the core's side of it: the chain that
# calls the hooks and the settings of each block. A module reads what it needs of them
# through module.h's functions (module_settings, module_index_name...) and
# module_figures.h's; a module that needs more asks for a function there.
CORE_ONLY = ("module_chain.h", "module_level.h")
MODULES_DIR = "modules"

DIRS = ("server", "modules")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(node):
    for rank, (name, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(node, p) for p in patterns):
            return rank, name
    return None


def nodes_of(stem):
    return PRIVATE.get(stem, (stem,))


def read_graph(root):
    """{file: [included project files]}, paths relative to root."""
    files = {}
    for d in DIRS:
        for name in sorted(os.listdir(os.path.join(root, d))):
            if name.endswith((".c", ".h")):
                files[os.path.join(d, name)] = None
    known = {os.path.basename(f): f for f in files}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            text = fh.read()
        files[f] = [known[os.path.basename(i)] for i in INCLUDE.findall(text)
                    if os.path.basename(i) in known]
    return files


def stem(path):
    """The file's node: its name without the extension, or the family it belongs to."""
    name = os.path.splitext(os.path.basename(path))[0]
    return FAMILY_OF.get(name, name)


def loops(edges):
    """The strongly connected components with more than one node (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def check(root):
    errors = []
    graph = read_graph(root)
    edges = {}
    for f, includes in graph.items():
        if layer_of(stem(f)) is None:
            errors.append(f"{f}: in no layer: add it to LAYERS in {os.path.relpath(__file__)}")
            continue
        for inc in includes:
            lower, higher = layer_of(stem(f)), layer_of(stem(inc))
            if higher is None:
                continue  # reported as a file of its own
            if higher[0] > lower[0]:
                errors.append(f"{f} ({lower[1]}) includes {os.path.basename(inc)}, "
                              f"a higher layer ({higher[1]})")
            if any(fnmatch.fnmatchcase(stem(inc), p) for p in NEVER.get(lower[1], ())):
                errors.append(f"{f} ({lower[1]}) includes {os.path.basename(inc)}, "
                              f"which the {lower[1]} layer must not know")
            for a in nodes_of(stem(f)):
                for b in nodes_of(stem(inc)):
                    if a != b:
                        edges.setdefault(a, set()).add(b)
    for f, includes in graph.items():
        if os.path.dirname(f) != MODULES_DIR:
            continue
        for inc in includes:
            if os.path.basename(inc) in CORE_ONLY:
                errors.append(f"{f} includes {os.path.basename(inc)}, the core's side of the "
                              "module interface: use module.h's functions")
    for comp in loops(edges):
        if comp not in ALLOWED_LOOPS:
            errors.append("include loop: " + " <-> ".join(sorted(comp)))
    return errors, len(graph)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    errors, n = check(root)
    for e in errors:
        print("check_layers: " + e)
    if errors:
        return 1
    print(f"check_layers: {n} files, includes go one way, no loops; "
          "no module includes " + ", ".join(CORE_ONLY))
    return 0


if __name__ == "__main__":
    sys.exit(main())
