// An agent's session with `airlock mcp`, driven by the official MCP TypeScript SDK over stdio
// or streamable HTTP: node client.mjs stdio AIRLOCK_BIN | node client.mjs http URL KEY.
// It prints one JSON transcript line per step; the Go test reads and checks them.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, key] = process.argv.slice(2);
const transport = mode === "stdio"
  ? new StdioClientTransport({ command: target, args: ["mcp"], env: process.env, stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
const client = new Client({ name: "airlock-e2e-ts", version: "1.0.0" });
const say = (step, value) => console.log(JSON.stringify({ step, value }));

async function tool(name, args, opts) {
  const res = await client.callTool({ name, arguments: args }, undefined, opts);
  const text = (res.content || []).map((c) => c.text || "").join("");
  return { isError: !!res.isError, structured: res.structuredContent, text };
}

// fetchPort opens an exposed port's URL as a reviewer's browser would: the capability in the
// URL is traded for a cookie, and the page is fetched with it.
async function fetchPort(url) {
  const first = await fetch(url, { redirect: "manual" });
  const cookie = (first.headers.get("set-cookie") || "").split(";")[0];
  const page = new URL(url);
  page.search = "";
  const res = await fetch(page, { headers: { cookie } });
  return { first: first.status, status: res.status, body: (await res.text()).slice(0, 300) };
}

try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  say("tools", tools.map((t) => t.name).sort());
  const created = await tool("sandbox_create", { allow: ["api.example.test=demo"] });
  say("sandbox_create", created);
  const lease = created.structured.lease;
  say("sandbox_list", await tool("sandbox_list", {}));
  const progress = [];
  // The SDK handles a notification a moment after it arrives, and forgets a call's progress
  // handler as soon as its result arrives: output written at the very end of a command can
  // come too late for it. The pauses let each line arrive while the call still runs.
  say("run", await tool("run", { lease, command: "echo one; sleep 0.3; echo two >&2; sleep 0.3; exit 3" },
    { onprogress: (p) => progress.push(p.message || ""), resetTimeoutOnProgress: true }));
  say("progress", progress);
  say("run_allowed", await tool("run", { lease, command: "curl -sS https://api.example.test/whoami" }));
  say("run_denied", await tool("run", { lease, command: "curl -sS http://evil.example/" }));
  say("explain", await tool("explain", { lease, url: "http://evil.example/" }));
  say("write_file", await tool("write_file", { lease, path: "src/hello.py", content: "print('hello from ts')\n" }));
  say("read_file", await tool("read_file", { lease, path: "src/hello.py" }));
  say("list_files", await tool("list_files", { lease, path: "src" }));
  say("run_written", await tool("run", { lease, argv: ["python3", "src/hello.py"] }));
  const server = await tool("start_process", { lease, command: "echo serving; exec python3 -u -m http.server 8000 --bind 0.0.0.0 --directory /workspace" });
  say("start_process", server);
  const pid = server.structured.id;
  let out = await tool("process_output", { lease, process: pid, wait_seconds: 10 });
  say("process_output", out);
  // Read on from where the last read stopped until the server says it listens.
  let seen = out.structured.stdout;
  for (let i = 0; i < 10 && !seen.includes("Serving HTTP"); i++) {
    out = await tool("process_output", { lease, process: pid, stdout_offset: out.structured.stdout_offset, wait_seconds: 3 });
    seen += out.structured.stdout;
  }
  say("process_listening", seen);
  const exposed = await tool("expose_port", { lease, port: 8000 });
  say("expose_port", exposed);
  say("port_fetch", await fetchPort(exposed.structured.url));
  say("kill_process", await tool("kill_process", { lease, process: pid }));
  // Each call asks from where the last one ended, so it waits (up to 3s) for more output or
  // the end instead of answering at once with output already seen.
  let ended;
  let outOff = 8, errOff = 0;
  for (let i = 0; i < 10; i++) {
    ended = await tool("process_output", { lease, process: pid, stdout_offset: outOff, stderr_offset: errOff, wait_seconds: 3 });
    if (!ended.structured.process.running) break;
    outOff = ended.structured.stdout_offset;
    errOff = ended.structured.stderr_offset;
  }
  say("process_ended", ended);
  say("bad_lease", await tool("run", { lease: "l-nope", command: "true" }));
  say("sandbox_release", await tool("sandbox_release", { lease }));
  // One left for the session's end to release.
  say("left", await tool("sandbox_create", { allow: ["api.example.test"] }));
  // Over HTTP a session ends when the client says so (DELETE), or when it idles out.
  if (mode === "http") await transport.terminateSession();
  await client.close();
  say("closed", true);
} catch (e) {
  say("error", String(e && e.stack || e));
  process.exitCode = 1;
}
