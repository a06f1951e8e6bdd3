"""docs/configuration.md's reference table, rendered from the schema table in
service/src/config/config.c as `snowflaked --print-schema` prints it (keys, types, defaults of the
embedded config.json, ranges, meanings). The table is the part of the file between the BEGIN and
END markers; the prose around it is written by hand.

    python3 test/docs/configuration.py BINARY          # exit 1 and a diff when the file is stale
    python3 test/docs/configuration.py BINARY --write  # regenerate it (make docs)

ctest docs_config runs the check (test_docs_config.py)."""
import difflib
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOC = os.path.join(ROOT, "docs", "configuration.md")
BEGIN = ("<!-- BEGIN generated from service/src/config/config.c by test/docs/configuration.py "
         "(make docs); do not edit by hand -->")
END = "<!-- END generated -->"
UNITS = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
TYPES = {"u32": "integer", "u64": "integer", "bool": "boolean", "string": "string",
         "enum": "string", "epoch": "string or integer", "worker": "integer or string",
         "u32_or_max": "integer or `\"max\"`", "list": "array of strings",
         "namespaces": "array of objects"}


def schema(binary):
    out = subprocess.run([binary, "--print-schema"], stdout=subprocess.PIPE, check=True,
                         env={"PATH": os.environ.get("PATH", "")}, timeout=30).stdout
    return json.loads(out)


def _number(key, v):
    if ("bytes" in key or key.endswith("buf")) and v >= 1024:
        for size, unit in UNITS:
            if v % size == 0:
                return "%d %s" % (v // size, unit)
    return str(v)


def values(k):
    """The range column: what the schema accepts for the key on its own."""
    t = k["type"]
    if t == "bool":
        return "`true`, `false`"
    if t == "enum":
        return " \\| ".join("`%s`" % c for c in k["choices"])
    if t == "string":
        if k["ipaddr"]:
            return "numeric IPv4 or IPv6 address"
        return "%d–%d bytes" % (k["min"], k["max"])
    if t == "list":
        return "%d–%d bytes together" % (k["min"], k["max"])
    if t == "namespaces":
        return "at most %d bytes of JSON" % k["max"]
    if t == "epoch":
        return "RFC 3339 UTC time or integer ms, 1970 to 9999"
    rng = "%s–%s" % (_number(k["key"], k["min"]), _number(k["key"], k["max"]))
    if t == "worker":
        return rng + ", `\"ordinal\"`, `\"env:NAME\"`, `\"etcd\"`"
    if t == "u32_or_max":
        return rng + " or `\"max\"`"
    return rng


def render(keys):
    lines = [BEGIN, "", "| key | type | default | values | meaning |", "|---|---|---|---|---|"]
    for k in keys:
        cells = ["`%s`" % k["key"], TYPES[k["type"]], "`%s`" % json.dumps(k["default"]),
                 values(k), k["doc"].replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", END])


def generated(binary, text):
    """text with its generated part replaced by a fresh rendering."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError("%s: needs exactly one BEGIN and one END marker:\n%s\n%s"
                         % (DOC, BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    return head + render(schema(binary)) + rest.split(END, 1)[1]


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    fresh = generated(argv[1], text)
    if "--write" in argv[2:]:
        if fresh != text:
            with open(DOC, "w", encoding="utf-8") as f:
                f.write(fresh)
            print("docs/configuration.md regenerated")
        return 0
    if fresh != text:
        sys.stdout.writelines(difflib.unified_diff(
            text.splitlines(True), fresh.splitlines(True), "docs/configuration.md (committed)",
            "docs/configuration.md (from the schema)"))
        print("docs/configuration.md is stale: run `make docs` and commit it")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
