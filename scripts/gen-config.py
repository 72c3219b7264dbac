#!/usr/bin/env python3
"""Generates docs/CONFIG.md, the configuration reference, from the binaries.

Every flag, its environment variable, its default and its meaning come from
the `--help` of each binary and each of its subcommands (walked through their
"Commands:" sections), so the reference says what the binaries do, not what
someone remembered. The environment variables hookfleet reads that are not
flags are a short hand-kept list below (NON_FLAG_ENV).

    scripts/gen-config.py                 # build the binaries, write docs/CONFIG.md
    scripts/gen-config.py --bin-dir DIR   # use binaries already built in DIR
    scripts/gen-config.py --output -      # print instead of writing

The binaries run with an empty environment but PATH and HOME: the defaults
printed are the built-in ones, not this machine's settings, and no secret
value can reach the reference (clap prints `[env: NAME=value]` for a set
variable; a value seen here stops the generator).

tests/config_reference.rs runs this script and fails when docs/CONFIG.md
differs from what it prints.
"""

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The binaries, in the order the reference lists them.
BINARIES = ["hookfleet", "hookfleet-worker", "hookfleet-sweeper", "hookfleet-producer"]

REGENERATE = "scripts/gen-config.py"

# Variables hookfleet reads that are not flags (keep in step with
# `grep -rn 'env::var\|var_os' crates/*/src`; tests/config_reference.rs checks
# that every HOOKFLEET_* variable in the sources is named in the reference).
NON_FLAG_ENV = [
    (
        "HOOKFLEET_RENDERER",
        "the program started as the template renderer, a child process that "
        "renders every template under memory and CPU limits (default: the "
        "running binary itself, which every hookfleet binary can serve as). "
        "Only a program embedding the producer library needs it.",
    ),
    (
        "RUST_LOG",
        "log level and filter, in `tracing` EnvFilter syntax "
        "(e.g. `info`, `warn,hookfleet_worker=debug`); default `info`. "
        "The format is `--log-format`.",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "the full OTLP/HTTP URL traces go to (nothing is added to it); turns "
        "tracing on like `--otlp-endpoint`, which it overrides.",
    ),
    (
        "OTEL_SERVICE_NAME",
        "the service name on exported spans (default: hookfleet-worker, "
        "hookfleet-producer, or hookfleet-ingest for `serve`).",
    ),
    (
        "OTEL_BSP_MAX_QUEUE_SIZE",
        "spans waiting for export, beyond which they are dropped (default "
        "16384).",
    ),
    (
        "OTEL_BSP_SCHEDULE_DELAY",
        "milliseconds between exports of the span queue (default 1000).",
    ),
]

# Variables read by the libraries hookfleet links, not by its own code.
LIBRARY_ENV = [
    (
        "OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_RESOURCE_ATTRIBUTES, …",
        "the OpenTelemetry SDK's and OTLP exporter's own settings, with "
        "tracing on (e.g. `OTEL_TRACES_SAMPLER=parentbased_traceidratio` "
        "and `OTEL_TRACES_SAMPLER_ARG=0.01` trace one event in a hundred); "
        "read by opentelemetry-otlp and opentelemetry_sdk.",
    ),
    (
        "TOKIO_WORKER_THREADS",
        "threads of the async runtime of hookfleet-worker, hookfleet-sweeper "
        "and hookfleet-producer (default: one per CPU); read by tokio.",
    ),
    (
        "PGSSLMODE, PGSSLROOTCERT, PGCONNECT_TIMEOUT, PGPASSFILE, …",
        "any Postgres connection parameter `DATABASE_URL` does not set; read "
        "by libpq.",
    ),
    (
        "SSL_CERT_FILE, SSL_CERT_DIR",
        "the CA certificates HTTPS receivers are verified against (default: "
        "the system's); read by OpenSSL.",
    ),
]

# Proxy variables are deliberately not in the list: the delivery client
# ignores HTTP_PROXY/HTTPS_PROXY/NO_PROXY (crates/core/src/deliver.rs).

SPEC_KEYS = ("env", "default", "possible values", "aliases", "short aliases")
SPEC_RE = re.compile(
    r"\s*\[(%s): ((?:[^\[\]]|\[[^\[\]]*\])*)\]$" % "|".join(re.escape(k) for k in SPEC_KEYS)
)
ENTRY_RE = re.compile(r"^ {2,6}(?=[-<\[])")
HEADING_RE = re.compile(r"^(\S[^:]*):\s*$")


class GenError(Exception):
    pass


def help_text(bin_dir, argv):
    """The `--help` of one binary or subcommand, run with a bare environment."""
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    path = os.path.join(bin_dir, argv[0])
    if not os.path.exists(path):
        raise GenError("%s is missing: build the binaries first (cargo build --bins)" % path)
    out = subprocess.run(
        [path] + argv[1:] + ["--help"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=30,
    )
    if out.returncode != 0:
        raise GenError("%s --help failed (%d): %s" % (" ".join(argv), out.returncode, out.stderr))
    return out.stdout


def parse_help(text):
    """Splits clap's help into about, usage, commands and argument entries."""
    lines = text.rstrip("\n").split("\n")
    about, usage, commands, entries = [], "", [], []
    section = "about"
    entry = None
    for line in lines:
        if section == "after":
            break
        if line.startswith("Usage: "):
            usage = line[len("Usage: "):].strip()
            section = "usage"
            continue
        heading = HEADING_RE.match(line)
        if heading and not line.startswith(" "):
            if heading.group(1) == "Examples":
                # An after_help's examples: --help shows them, the reference
                # does not list them as flags.
                section = "after"
                continue
            section = "commands" if heading.group(1) == "Commands" else "args"
            entry = None
            continue
        if section == "about":
            about.append(line)
        elif section == "commands":
            m = re.match(r"^  (\S+)", line)
            if m:
                commands.append(m.group(1))
        elif section == "args":
            m = ENTRY_RE.match(line)
            if m:
                head = line.strip()
                parts = re.split(r"\s{2,}", head, maxsplit=1)
                entry = {"spec": parts[0], "lines": [parts[1]] if len(parts) > 1 else []}
                entries.append(entry)
            elif line.strip() and not line.startswith(" "):
                # Unindented text after the sections (an after_help).
                section = "after"
            elif entry is not None:
                entry["lines"].append(line.strip())
    return paragraphs(about), usage, commands, entries


def paragraphs(lines):
    """Lines joined into paragraphs (blank lines separate them)."""
    out, cur = [], []
    for line in lines + [""]:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            out.append(" ".join(cur))
            cur = []
    return out


def parse_entry(entry, usage):
    """One argument: its spec, env, default, possible values and meaning."""
    spec = entry["spec"]
    paras, possible = [], []
    for block in split_blocks(entry["lines"]):
        # Long help lists possible values with their help, one a line.
        if block[0] == "Possible values:":
            possible.extend(re.match(r"^- ([^:]+)", i).group(1).strip() for i in block[1:])
        else:
            paras.append(" ".join(block))
    meaning = " ".join(p for p in paras if p)
    found = {}
    while True:
        m = SPEC_RE.search(meaning)
        if not m:
            break
        found[m.group(1)] = m.group(2)
        meaning = meaning[: m.start()].rstrip()
    env, secret = None, False
    if "env" in found:
        name, eq, value = found["env"].partition("=")
        if value:
            raise GenError(
                "%s printed a value for %s: the environment was not cleared" % (spec, name)
            )
        env, secret = name, not eq
    if "possible values" in found:
        possible = [v.strip() for v in found["possible values"].split(",")]
    long_flag = re.search(r"--[A-Za-z0-9][A-Za-z0-9-]*", spec)
    positional = spec.startswith("<") or spec.startswith("[")
    takes_value = positional or "<" in spec
    # Positional arguments show whether they are required by their brackets.
    required = (
        not positional
        and long_flag is not None
        and re.search(r"(^|\s)%s(\s|$)" % re.escape(long_flag.group(0)), usage) is not None
    )
    return {
        "key": long_flag.group(0) if long_flag else spec,
        "spec": spec,
        "positional": positional,
        "takes_value": takes_value,
        "env": env,
        "secret": secret,
        "default": found.get("default"),
        "possible": possible,
        "aliases": found.get("aliases"),
        "required": required,
        "meaning": meaning,
    }


def split_blocks(lines):
    """An entry's lines in blocks separated by blank lines."""
    blocks, cur = [], []
    for line in lines + [""]:
        if line:
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    return blocks


def walk(bin_dir, argv):
    """A command and its subcommands, depth first, in clap's order."""
    about, usage, commands, entries = parse_help(help_text(bin_dir, argv))
    args = [parse_entry(e, usage) for e in entries]
    args = [a for a in args if a["key"] not in ("--help", "--version")]
    node = {"argv": argv, "about": about, "usage": usage, "args": args, "children": []}
    for name in commands:
        if name != "help":
            node["children"].append(walk(bin_dir, argv + [name]))
    return node


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def code(text):
    return "`%s`" % text if "`" not in text else "`` %s ``" % text


def row(a):
    flag = code(a["spec"])
    if a["positional"]:
        flag += " (argument)"
    env = code(a["env"]) if a["env"] else "—"
    if a["secret"]:
        env += " (secret)"
    if a["default"] is not None:
        default = code(a["default"])
    elif not a["takes_value"]:
        default = "off"
    else:
        default = "—"
    meaning = a["meaning"]
    extra = []
    if a["possible"]:
        extra.append("One of " + ", ".join(code(v) for v in a["possible"]) + ".")
    if a["aliases"]:
        extra.append("Also " + ", ".join(code(v.strip()) for v in a["aliases"].split(",")) + ".")
    if a["required"]:
        extra.append("**Required.**")
    # clap drops the full stop of a one-sentence help: every meaning gets one.
    if meaning and not meaning.endswith((".", "?", "!")):
        meaning += "."
    meaning = " ".join([meaning] + extra).strip() or "(no description)"
    return "| %s | %s | %s | %s |" % (cell(flag), cell(env), cell(default), cell(meaning))


def table(args):
    out = ["| flag | env | default | meaning |", "| --- | --- | --- | --- |"]
    out.extend(row(a) for a in args)
    return out


def same(a, b):
    keys = ("spec", "env", "secret", "default", "possible", "aliases", "meaning")
    return all(a[k] == b[k] for k in keys)


def render(trees):
    out = []
    w = out.append
    w("# Configuration reference")
    w("")
    w(
        "This file is generated from the binaries' own `--help` (their clap "
        "definitions) by `%s`, which builds the binaries and rewrites it; "
        "do not edit it by hand. `tests/config_reference.rs` regenerates it "
        "and fails when this file is stale, and fails when a `HOOKFLEET_*` "
        "variable in the sources is not named here." % REGENERATE
    )
    w("")
    w(
        "Every setting is a flag; most have an environment variable too. A "
        "flag given on the command line wins over its variable, and the "
        "variable over the default. Variables marked *secret* never have "
        "their values printed, not even by `--help`. Durations are written "
        "like `30s`, `5m`, `2h`, `1.5h` or `1h30m`. Every command also takes `-h, --help`, and "
        "every binary `-V, --version`."
    )
    w("")

    # The flags every binary takes: the shared Settings.
    first = trees[0]["args"]
    shared = [a for a in first if all(any(same(a, b) for b in t["args"]) for t in trees[1:])]
    shared_keys = {a["key"] for a in shared}
    w("## Shared by every binary")
    w("")
    w(
        "%s all take these. They belong to the binary, not to a subcommand: "
        "write them before it (`hookfleet --database-url URL webhook list`), "
        "or set the variables." % ", ".join(code(t["argv"][0]) for t in trees)
    )
    w("")
    out.extend(table(shared))
    w("")

    w("## Environment variables that are not flags")
    w("")
    w("| variable | meaning |")
    w("| --- | --- |")
    for name, meaning in NON_FLAG_ENV:
        w("| %s | %s |" % (code(name), cell(meaning[0].upper() + meaning[1:])))
    w("")
    w("Read by the libraries hookfleet links (not by its own code):")
    w("")
    w("| variable | meaning |")
    w("| --- | --- |")
    for name, meaning in LIBRARY_ENV:
        names = ", ".join(code(n.strip()) if n.strip() != "…" else "…" for n in name.split(","))
        w("| %s | %s |" % (names, cell(meaning[0].upper() + meaning[1:])))
    w("")
    w(
        "The delivery client ignores `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY`, "
        "and the template renderer starts with an empty environment."
    )
    w("")

    def section(node, level, inherited):
        argv = node["argv"]
        w("%s %s" % ("#" * level, " ".join(argv)))
        w("")
        for p in node["about"]:
            w(p)
            w("")
        w("Usage: `%s`" % node["usage"])
        w("")
        own = [
            a
            for a in node["args"]
            if not (level == 2 and a["key"] in shared_keys)
            and not any(same(a, b) for b in inherited)
        ]
        if level == 2:
            w("The shared flags above, and:" if own else "The shared flags above; no flags of its own.")
            w("")
        elif not own:
            w("No flags of its own.")
            w("")
        if own:
            out.extend(table(own))
            w("")
        for child in node["children"]:
            section(child, min(level + 1, 6), inherited + node["args"])

    for tree in trees:
        section(tree, 2, [])

    # Every variable, and where it is used.
    index = {}
    for tree in trees:
        stack = [tree]
        while stack:
            node = stack.pop(0)
            for a in node["args"]:
                if a["env"]:
                    where = index.setdefault(a["env"], {"flags": [], "commands": [], "secret": a["secret"]})
                    if a["spec"].split(" ")[0] not in where["flags"]:
                        where["flags"].append(a["spec"].split(" ")[0])
                    cmd = "shared" if (a["key"] in shared_keys and len(node["argv"]) == 1) else " ".join(node["argv"])
                    if cmd not in where["commands"]:
                        where["commands"].append(cmd)
            stack.extend(node["children"])
    for name, _ in NON_FLAG_ENV:
        index.setdefault(name, {"flags": [], "commands": ["not a flag (see above)"], "secret": False})
    w("## Every environment variable")
    w("")
    w("| variable | flag | where |")
    w("| --- | --- | --- |")
    for name in sorted(index):
        e = index[name]
        flags = ", ".join(code(f) for f in e["flags"]) or "—"
        commands = ", ".join(
            "every binary" if c == "shared" else (code(c) if e["flags"] else c)
            for c in e["commands"]
        )
        label = code(name) + (" (secret)" if e["secret"] else "")
        w("| %s | %s | %s |" % (cell(label), cell(flags), cell(commands)))
    return "\n".join(out).rstrip("\n") + "\n"


def target_dir():
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    return json.loads(meta.stdout)["target_directory"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin-dir", help="where the built binaries are (default: build them with cargo)")
    p.add_argument("--output", default=os.path.join(ROOT, "docs", "CONFIG.md"),
                   help="file to write, or - for standard output (default: docs/CONFIG.md)")
    opts = p.parse_args()
    bin_dir = opts.bin_dir
    if bin_dir is None:
        subprocess.run(["cargo", "build", "--bins", "--quiet"], cwd=ROOT, check=True)
        bin_dir = os.path.join(target_dir(), "debug")
    try:
        text = render([walk(bin_dir, [b]) for b in BINARIES])
    except GenError as e:
        sys.exit("gen-config: %s" % e)
    if opts.output == "-":
        sys.stdout.write(text)
    else:
        with open(opts.output, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote %s" % os.path.relpath(opts.output, ROOT), file=sys.stderr)


if __name__ == "__main__":
    main()
