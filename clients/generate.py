"""Generates both client libraries' protocol bindings from proto-docs/openrpc.json.

    python3 clients/generate.py            # rewrite the generated files
    python3 clients/generate.py --check    # exit 1, naming this command, when one is stale
    python3 clients/generate.py --doc D --clients DIR   # from another document, into a copy

The daemon's method list (`src/rpc/methods.rs`) makes openrpc.json; this script makes, from
that document alone, every file of the clients that knows a method, a type or a protocol name:

- Python: `compactd_client/types.py` (TypedDicts of every schema, the named results, the error
  codes, event and hook names) and `compactd_client/_methods.py` (one typed method per
  protocol method, shared by `Client` and `AsyncClient`);
- TypeScript: `src/protocol.js` (error codes, event and hook names), `src/index.js` (the
  `CompactdClient` class: one method per protocol method over the hand-written `ClientCore`)
  and `src/index.d.ts` (every type and method signature; package.json's `types`);
- both READMEs: the method list between their `<!-- methods -->` markers.

Hand-written code is only the connection machinery (framing, transports, events, hooks):
`_wire.py`, `client.py`, `aio.py`; `src/core.js`, `src/core.d.ts`. Adding a protocol method
therefore touches no client file by hand: regenerate openrpc.json, then run this script.

How a method looks in each language (one rule, so no method needs a hand-made signature):
- Python: snake_case name and arguments; the required params first (in the document's order),
  then the optional ones defaulting to ``None`` (omitted from the request), then ``timeout``
  (seconds; a method the daemon runs as a task, `x-run: "task"`, waits `COMPACT_TIMEOUT`).
- TypeScript: one style for every method: a session's id always comes first (`sessionId`,
  required or not: `subscribe()` is every session, `subscribe('s1', { events })` one), then
  the other required params as positional arguments (in the document's order), then the
  optional ones in one trailing options object; a method with neither takes that object
  alone. `undefined` values are omitted from the request.

The tests compare the committed files with what this prints (`tests/clients.rs` and the Python
suite run ``--check``), so a stale binding fails the build with this command in its message.
No dependencies beyond the standard library.
"""

import argparse
import json
import re
import sys
from pathlib import Path

CLIENTS = Path(__file__).resolve().parent
REPO = CLIENTS.parent
DOC = REPO / "proto-docs" / "openrpc.json"
PY = CLIENTS / "python" / "compactd_client"
TS = CLIENTS / "typescript" / "src"
COMMAND = "python3 clients/generate.py"

#: Pi's own JSON (entries and messages) passes through as plain dicts in Python.
OPAQUE = {"SessionEntry", "AgentMessage", "CompactionEntry", "BranchSummaryEntry"}


# --- names ----------------------------------------------------------------------------------


def snake(name):
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def pascal(name):
    """`compaction_end` → `CompactionEnd`, `window/logMessage` → `WindowLogMessage`."""
    parts = re.split(r"[_/$]+", name)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)


def ref_name(schema):
    return schema["$ref"].rsplit("/", 1)[-1]


def one_line(text):
    return " ".join((text or "").split())


def is_notice(message):
    """LSP-style `window/…` notifications are asked for on `initialize`, not subscribed to."""
    return "/" in message["name"]


class Protocol:
    """What both generators read from the document."""

    def __init__(self, doc):
        self.doc = doc
        self.schemas = doc["components"]["schemas"]
        self.methods = sorted(doc["methods"], key=lambda m: m["name"])
        notifications = doc.get("x-notifications", [])
        self.events = [n for n in notifications if not is_notice(n)]
        self.notices = [n for n in notifications if is_notice(n)]
        self.hooks = [h for h in doc.get("x-hooks", []) if not h["name"].startswith("$/")]
        self.request_hooks = [h for h in self.hooks if h.get("kind") == "request"]
        self.errors = sorted(doc.get("x-errors", []), key=lambda e: -e["code"])
        for m in self.methods:
            for p in m["params"]:
                if p["name"] == "timeout":
                    raise SystemExit(f"{m['name']}: a param named `timeout` clashes with the Python binding's")

    @staticmethod
    def long_running(method):
        return method.get("x-run") == "task"

    @staticmethod
    def required(method):
        return [p for p in method["params"] if p.get("required")]

    @staticmethod
    def optional(method):
        return [p for p in method["params"] if not p.get("required")]

    def result_aliases(self):
        """Named results that are no component schema (`Branch`, `ContextUsage`, …)."""
        out = {}
        for m in self.methods:
            r = m["result"]
            if r["name"] not in self.schemas:
                out[r["name"]] = r["schema"]
        return dict(sorted(out.items()))


# --- Python ---------------------------------------------------------------------------------


def py_type(schema, nullable=False):
    if schema is True or schema == {} or schema is None:
        return "Any"
    if "$ref" in schema:
        t = ref_name(schema)
    elif "anyOf" in schema or "oneOf" in schema:
        parts = [py_type(s) for s in schema.get("anyOf") or schema.get("oneOf")]
        if "None" in parts:
            rest = [p for p in parts if p != "None"]
            return f"Optional[{rest[0] if len(rest) == 1 else 'Union[' + ', '.join(rest) + ']'}]"
        return f"Union[{', '.join(parts)}]"
    elif "enum" in schema:
        return f"Literal[{', '.join(json.dumps(v) for v in schema['enum'])}]"
    elif "const" in schema:
        return f"Literal[{json.dumps(schema['const'])}]"
    else:
        kind = schema.get("type")
        if isinstance(kind, list):
            inner = [k for k in kind if k != "null"]
            t = py_type(dict(schema, type=inner[0] if len(inner) == 1 else inner))
            return f"Optional[{t}]" if "null" in kind else t
        t = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}.get(kind)
        if kind == "array":
            t = f"List[{py_type(schema.get('items', True))}]"
        elif kind == "object" or t is None:
            t = "Dict[str, Any]"
    return f"Optional[{t}]" if nullable else t


GENERATED_PY = "# Generated by `{cmd}` from proto-docs/openrpc.json: do not edit, regenerate."


def python_types(p):
    out = [
        '"""TypedDicts of every compactd schema and result, and the protocol\'s names (error codes,',
        "events, hooks), generated from proto-docs/openrpc.json. The client returns plain dicts;",
        'the types are for type checkers and readers."""',
        "",
        GENERATED_PY.format(cmd=COMMAND),
        "from __future__ import annotations",
        "",
        "from typing import Any, Dict, List, Optional, Union",
        "",
        "try:",
        "    from typing import Literal, TypedDict",
        "except ImportError:  # pragma: no cover - Python 3.7",
        "    from typing_extensions import Literal, TypedDict  # type: ignore",
        "",
        "",
    ]
    aliases, classes = [], []
    for name in sorted(p.schemas):
        s = p.schemas[name]
        if name in OPAQUE:
            aliases.append(f"{name} = Dict[str, Any]")
            continue
        props = s.get("properties")
        if not props:
            aliases.append(f"{name} = {py_type(dict(s, description=None))}")
            continue
        required = set(s.get("required", []))
        req = [(k, v) for k, v in props.items() if k in required]
        opt = [(k, v) for k, v in props.items() if k not in required]
        lines = []
        base = "TypedDict"
        if req and opt:
            lines.append(f"class _{name}Required(TypedDict):")
            lines += [f"    {k}: {py_type(v)}" for k, v in req]
            lines += ["", ""]
            base = f"_{name}Required"
        body = opt if (req and opt) else (req or opt)
        total = "" if (req and not opt) else ", total=False"
        lines.append(f"class {name}({base}{total}):")
        if one_line(s.get("description")):
            lines += [f'    """{one_line(s.get("description"))}"""', ""]
        lines += [f"    {k}: {py_type(v)}" for k, v in body]
        classes.append("\n".join(lines))
    out.append("\n\n\n".join(classes))
    out += ["", "", "# Plain aliases: enums, opaque Pi JSON, unions, and the named results of methods."]
    out += aliases
    out += [f"{k} = {py_type(v)}" for k, v in p.result_aliases().items()]
    out += ["", "#: The result type of each protocol method, by method name.", "RESULTS = {"]
    out += [f'    "{m["name"]}": "{m["result"]["name"]}",' for m in p.methods]
    out += ["}", "", "#: JSON-RPC codes by `error.data.kind` (proto-docs/errors.md). Prefer `CompactdError.kind`.", "ERROR_CODES = {"]
    out += [f'    "{e["kind"]}": {e["code"]},' for e in p.errors]
    out += ["}", "", "#: The events a subscriber receives (`subscribe`)."]
    out.append(f"EVENTS = {tuple(e['name'] for e in p.events)!r}")
    out.append("#: Notifications a client asks for on `initialize` (`logNotifications`).")
    out.append(f"NOTICES = {tuple(e['name'] for e in p.notices)!r}")
    out.append("#: The hooks `registerHooks` accepts.")
    out.append(f"HOOKS = {tuple(h['name'] for h in p.hooks)!r}")
    out.append("#: The request hooks: the daemon waits for the client's answer (the others are notifications).")
    out.append(f"REQUEST_HOOKS = {tuple(h['name'] for h in p.request_hooks)!r}")
    out.append("")
    return "\n".join(out)


def python_methods(p):
    used = set()

    def annotate(schema, optional):
        t = py_type(schema)
        for word in re.findall(r"[A-Za-z_]\w*", t):
            if word[:1].isupper() and word not in {"Any", "Dict", "List", "Optional", "Union", "Literal"}:
                used.add(word)
        if optional and not t.startswith("Optional[") and t != "Any":
            t = f"Optional[{t}]"
        return t

    bodies = []
    for m in p.methods:
        args, mapping = ["self"], []
        for prm in p.required(m):
            args.append(f"{snake(prm['name'])}: {annotate(prm['schema'], False)}")
        for prm in p.optional(m):
            args.append(f"{snake(prm['name'])}: {annotate(prm['schema'], True)} = None")
        for prm in m["params"]:
            mapping.append(f"{prm['name']}={snake(prm['name'])}")
        if p.long_running(m):
            args.append("timeout: Optional[float] = COMPACT_TIMEOUT")
        else:
            args.append("timeout: Optional[float] = None")
        result = m["result"]["name"]
        used.add(result)
        summary = one_line(m.get("summary")).replace('"""', "'''").replace("\\", "\\\\")
        bodies.append(
            "\n".join(
                [
                    f"    def {snake(m['name'])}({', '.join(args)}) -> {result}:",
                    f'        """{summary}"""',
                    f'        return self._call("{m["name"]}", _p({", ".join(mapping)}), timeout)',
                ]
            )
        )
    imports = "".join(f"    {n},\n" for n in sorted(used))
    return (
        '"""One typed Python method per protocol method, shared by `Client` and `AsyncClient`.\n'
        "\n"
        "Generated from proto-docs/openrpc.json. Each method names its JSON-RPC method and maps its\n"
        "arguments to the params object (arguments left at ``None`` are omitted). `Client` returns\n"
        "the result; `AsyncClient` returns an awaitable of it. Results are plain dicts annotated\n"
        "with the TypedDicts of `types.py`. ``timeout``: seconds to wait for the reply (``None``:\n"
        "the client's default; the methods the daemon runs as tasks default to `COMPACT_TIMEOUT`).\n"
        '"""\n'
        "\n"
        f"{GENERATED_PY.format(cmd=COMMAND)}\n"
        "from __future__ import annotations\n"
        "\n"
        "from typing import Any, Dict, List, Optional  # noqa: F401 - the annotations name them\n"
        "\n"
        "from ._wire import params as _p\n"
        f"from .types import (  # noqa: F401 - the annotations name them\n{imports})\n"
        "\n"
        "JSON = Dict[str, Any]\n"
        "#: How long a long-running method (a compaction) may take by default, seconds: a real\n"
        "#: summarizer model can be slow.\n"
        "COMPACT_TIMEOUT = 600.0\n"
        "\n"
        "\n"
        "class Methods:\n"
        '    """The protocol, method by method (names in snake_case, params as in the protocol)."""\n'
        "\n"
        "    def _call(self, method: str, params: Optional[JSON] = None, timeout: Optional[float] = None) -> Any:\n"
        "        raise NotImplementedError\n"
        "\n" + "\n\n".join(bodies) + "\n"
    )


# --- TypeScript -----------------------------------------------------------------------------

TS_IDENT = re.compile(r"^[A-Za-z_$][\w$]*$")


def ts_key(k):
    return k if TS_IDENT.match(k) else json.dumps(k)


def ts_doc(text, indent=""):
    text = one_line(text).replace("*/", "*\\/")
    return [f"{indent}/** {text} */"] if text else []


def ts_union(parts):
    seen = []
    for part in parts:
        if part not in seen:
            seen.append(part)
    if "any" in seen:
        return "any"
    return " | ".join(seen)


def ts_wrap(t):
    return f"({t})" if " | " in t or " & " in t else t


def ts_type(schema, indent=""):
    if schema is True or schema is None or schema == {}:
        return "any"
    if "$ref" in schema:
        return ref_name(schema)
    if "anyOf" in schema or "oneOf" in schema:
        return ts_union([ts_type(s, indent) for s in schema.get("anyOf") or schema.get("oneOf")])
    if "enum" in schema:
        return ts_union([json.dumps(v) for v in schema["enum"]])
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return ts_union([ts_type(dict(schema, type=k), indent) for k in kind])
    if kind == "array":
        return f"{ts_wrap(ts_type(schema.get('items', True), indent))}[]"
    if kind == "object" or (kind is None and "properties" in schema):
        return ts_object(schema, indent)
    return {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}.get(kind, "any")


def ts_object(schema, indent=""):
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if not props:
        if isinstance(extra, dict) and extra:
            return f"{{ [key: string]: {ts_type(extra, indent)} }}"
        return "{ [key: string]: any }"
    required = set(schema.get("required", []))
    inner = indent + "  "
    lines = ["{"]
    for k, v in props.items():
        lines += ts_doc(v.get("description") if isinstance(v, dict) else None, inner)
        lines.append(f"{inner}{ts_key(k)}{'' if k in required else '?'}: {ts_type(v, inner)};")
    if extra is True or isinstance(extra, dict):
        lines.append(f"{inner}[key: string]: unknown;")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def ts_params_object(params, indent=""):
    """An object type of content descriptors (a method's params, an event's)."""
    schema = {
        "type": "object",
        "properties": {prm["name"]: dict(prm["schema"] if isinstance(prm["schema"], dict) else {}, **({"description": prm["description"]} if prm.get("description") else {})) for prm in params},
        "required": [prm["name"] for prm in params if prm.get("required")],
    }
    if not params:
        return "{}"
    return ts_object(schema, indent)


GENERATED_TS = "// Generated by `{cmd}` from proto-docs/openrpc.json: do not edit, regenerate."


def js_const_list(names):
    return "Object.freeze([\n" + "".join(f"  {json.dumps(n)},\n" for n in names) + "])"


def ts_protocol_js(p):
    codes = "".join(f"  {pascal(e['kind'])}: {e['code']},\n" for e in p.errors)
    return "\n".join(
        [
            GENERATED_TS.format(cmd=COMMAND),
            "// The protocol's names, read by the hand-written machinery (core.js) and re-exported by index.js.",
            "",
            "/** JSON-RPC error codes by kind (proto-docs/errors.md); `CompactdError.kind` is the kind. */",
            f"export const ErrorCodes = Object.freeze({{\n{codes}}});",
            "",
            "/** Events the daemon sends to subscribed connections (`subscribe`). */",
            f"export const EVENTS = {js_const_list(e['name'] for e in p.events)};",
            "",
            "/** Hooks a connection can register (`registerHooks`). */",
            f"export const HOOKS = {js_const_list(h['name'] for h in p.hooks)};",
            "",
            "/** The hooks the daemon asks (and waits for the answer); the others are notifications. */",
            f"export const REQUEST_HOOKS = {js_const_list(h['name'] for h in p.request_hooks)};",
            "",
            "/** Notifications a client asks for on `initialize` (`logNotifications: true`). */",
            f"export const NOTICES = {js_const_list(n['name'] for n in p.notices)};",
            "",
            "/** The methods the daemon runs as tasks (`x-run: \"task\"`): a client waits longer for them. */",
            f"export const TASK_METHODS = {js_const_list(m['name'] for m in p.methods if p.long_running(m))};",
            "",
        ]
    )


def ts_positional(p, m):
    """The params a TypeScript method takes as arguments: the session's id first (whether the
    method requires it or not), then the other required ones."""
    session = [prm for prm in m["params"] if prm["name"] == "sessionId"]
    return session + [prm for prm in p.required(m) if prm["name"] != "sessionId"]


def ts_options(p, m):
    """The params of a TypeScript method's trailing options object."""
    return [prm for prm in p.optional(m) if prm["name"] != "sessionId"]


def js_signature(p, m):
    """The JS argument list and the params expression of one method."""
    req = [prm["name"] for prm in ts_positional(p, m)]
    opt = [prm["name"] for prm in ts_options(p, m)]
    if not m["params"]:
        return "", "{}"
    if not req:
        return "options = {}", "options"
    args = list(req)
    fields = ", ".join(req)
    if opt:
        args.append("options = {}")
        return ", ".join(args), f"{{ ...options, {fields} }}"
    return ", ".join(args), f"{{ {fields} }}"


def ts_index_js(p):
    methods = []
    for m in p.methods:
        args, params = js_signature(p, m)
        methods += [
            *ts_doc(m.get("summary"), "  "),
            f"  {m['name']}({args}) {{",
            f"    return this._call({json.dumps(m['name'])}, {params});",
            "  }",
            "",
        ]
    return "\n".join(
        [
            GENERATED_TS.format(cmd=COMMAND),
            "// compactd-client: a JSON-RPC 2.0 client for the compactd daemon, no dependencies. The",
            "// connection machinery (framing, stdio and socket transports, events, hooks) is core.js;",
            "// this file adds one method per protocol method. Types: index.d.ts.",
            "",
            "import { ClientCore } from './core.js';",
            "",
            "export * from './core.js';",
            "export { ErrorCodes, EVENTS, HOOKS, NOTICES } from './protocol.js';",
            "",
            "/** A connection to the daemon with one method per protocol method (see `ClientCore` for",
            " * connecting, events and hooks). A session's id comes first, then the other required params;\n * optional ones in an options object. */",
            "export class CompactdClient extends ClientCore {",
            *methods[:-1],
            "}",
            "",
        ]
    )


def ts_index_dts(p):
    out = [
        GENERATED_TS.format(cmd=COMMAND),
        "// Types of compactd-client: every schema of the protocol, the events and hooks, and one",
        "// method per protocol method. Self-contained: no Node.js or other package types needed.",
        "",
        "import { ClientCore } from './core.js';",
        "",
        "export * from './core.js';",
        "",
    ]
    for name in sorted(p.schemas):
        s = p.schemas[name]
        out += ts_doc(s.get("description"))
        if s.get("properties") and s.get("type", "object") == "object":
            out.append(f"export interface {name} {ts_object(s)}")
        else:
            out.append(f"export type {name} = {ts_type(dict(s, description=None))};")
        out.append("")
    out.append("// The named results of methods that are no schema of their own.")
    for name, schema in p.result_aliases().items():
        out.append(f"export type {name} = {ts_type(schema)};")
    out.append("")
    codes = "".join(f"  {pascal(e['kind'])}: {e['code']};\n" for e in p.errors)
    out += [
        "/** JSON-RPC error codes by kind (proto-docs/errors.md). */",
        f"export declare const ErrorCodes: Readonly<{{\n{codes}}}>;",
        "",
        f"export type EventName = {ts_union([json.dumps(e['name']) for e in p.events])};",
        f"export type HookName = {ts_union([json.dumps(h['name']) for h in p.hooks])};",
        f"export type NoticeName = {ts_union([json.dumps(n['name']) for n in p.notices]) or 'never'};",
        "export declare const EVENTS: readonly EventName[];",
        "export declare const HOOKS: readonly HookName[];",
        "export declare const NOTICES: readonly NoticeName[];",
        "",
    ]
    for msg in [*p.events, *p.notices, *p.hooks]:
        out += ts_doc(msg.get("summary"))
        out.append(f"export interface {pascal(msg['name'])}Params {ts_params_object(msg['params'])}")
        out.append("")
    out.append("/** The params of each event and notice, by name (what `on(name, …)` passes). */")
    out.append("export interface EventParams {")
    for msg in [*p.events, *p.notices, *[h for h in p.hooks if h not in p.request_hooks]]:
        out.append(f"  {json.dumps(msg['name'])}: {pascal(msg['name'])}Params;")
    out += ["}", "", "/** The params of each hook, by name (what a hook handler gets). */", "export interface HookParams {"]
    for h in p.hooks:
        out.append(f"  {json.dumps(h['name'])}: {pascal(h['name'])}Params;")
    out += ["}", "", "/** What a request hook's handler may answer, by name (notification hooks: nothing). */", "export interface HookReplies {"]
    for h in p.hooks:
        reply = h.get("result")
        out.append(f"  {json.dumps(h['name'])}: {ts_type(reply['schema']) if reply else 'void'};")
    out += ["}", ""]
    out += [
        "/** A connection to the daemon with one method per protocol method (see `ClientCore` for",
        " * connecting, events and hooks). A session's id comes first, then the other required params;\n * optional ones in an options object. */",
        "export declare class CompactdClient extends ClientCore {",
    ]
    for m in p.methods:
        req, opt = ts_positional(p, m), ts_options(p, m)
        args = []
        for i, prm in enumerate(req):
            t = ts_type(prm["schema"], "  ")
            if not prm.get("required") and "null" not in t.split(" | "):
                t += " | null"
            if prm.get("required"):
                args.append(f"{prm['name']}: {t}")
            elif i == len(req) - 1:
                args.append(f"{prm['name']}?: {t}")
            else:
                # An optional session id before a required param: pass null for every session.
                args.append(f"{prm['name']}: {t} | undefined")
        if opt:
            args.append(f"options?: {ts_params_object(opt, '  ')}")
        out += ts_doc(m.get("summary"), "  ")
        out.append(f"  {m['name']}({', '.join(args)}): Promise<{m['result']['name']}>;")
    out += ["}", ""]
    return "\n".join(out)


# --- READMEs -------------------------------------------------------------------------------

MARK_OPEN, MARK_CLOSE = "<!-- methods -->", "<!-- /methods -->"


def readme_with_methods(text, names):
    """`text` with the list between the `<!-- methods -->` markers made from `names` (the
    README's own prose stays hand-written; tests/docs.rs checks the lists)."""
    start, end = text.find(MARK_OPEN), text.find(MARK_CLOSE)
    if start < 0 or end < start:
        return text
    lines, line = [], " "
    for i, name in enumerate(names):
        word = f"`{name}`" + ("," if i + 1 < len(names) else "")
        if len(line) + 1 + len(word) > 96:
            lines.append(line)
            line = " "
        line += " " + word
    lines.append(line)
    indent = text[text.rfind("\n", 0, start) + 1 : start]
    return text[: start + len(MARK_OPEN)] + "\n" + "\n".join(lines) + "\n" + indent + text[end:]


# --- main -----------------------------------------------------------------------------------


def outputs(doc, clients):
    """The generated files under `clients` (the checkout's `clients/`, or a copy of it)."""
    p = Protocol(json.loads(doc.read_text()))
    py = clients / PY.relative_to(CLIENTS)
    ts = clients / TS.relative_to(CLIENTS)
    names = [m["name"] for m in p.methods]
    readmes = {
        py.parent / "README.md": [snake(n) for n in names],
        ts.parent / "README.md": names,
    }
    lists = {path: readme_with_methods(path.read_text(), listed) for path, listed in readmes.items() if path.exists()}
    return {
        **lists,
        py / "types.py": python_types(p),
        py / "_methods.py": python_methods(p),
        ts / "protocol.js": ts_protocol_js(p),
        ts / "index.js": ts_index_js(p),
        ts / "index.d.ts": ts_index_dts(p),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    parser.add_argument("--doc", type=Path, default=DOC, help="the OpenRPC document (default: proto-docs/openrpc.json)")
    parser.add_argument("--clients", type=Path, default=CLIENTS, help="the clients directory to write (default: this one)")
    args = parser.parse_args()
    files = outputs(args.doc, args.clients.resolve())
    if args.check:
        stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
        for path in stale:
            print(f"{path} is stale: run {COMMAND}", file=sys.stderr)
        sys.exit(1 if stale else 0)
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
