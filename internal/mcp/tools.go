package mcp

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// hints are a tool's behaviour annotations. Every cove tool acts only on
// cove's own sandboxes, so none is open-world.
type hints struct {
	readOnly    bool // changes nothing
	destructive bool // may destroy or overwrite something
	idempotent  bool // calling it again with the same arguments changes nothing more
}

// readOnly is the hints of a tool that only looks.
func readOnly() hints { return hints{readOnly: true, idempotent: true} }

func tool(name, title, description string, h hints) *sdk.Tool {
	no := false
	return &sdk.Tool{
		Name:        name,
		Title:       title,
		Description: description,
		Annotations: &sdk.ToolAnnotations{
			Title:           title,
			ReadOnlyHint:    h.readOnly,
			DestructiveHint: &h.destructive,
			IdempotentHint:  h.idempotent,
			OpenWorldHint:   &no,
		},
	}
}

// add registers a tool whose schemas are inferred from its Go types, then
// made portable: a slice is inferred as type ["null","array"], which
// clients that map schemas to a single-type dialect (Gemini's, for one)
// reject, and the tools never send null for one anyway.
//
// Every call runs with the API of its caller (callerAPI): over HTTP, the
// key of the request that carried it.
func add[In, Out any](s *Server, t *sdk.Tool, h sdk.ToolHandlerFor[In, Out]) {
	t.InputSchema = portableSchema[In]()
	t.OutputSchema = portableSchema[Out]()
	sdk.AddTool(s.srv, t, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
		return h(s.withCaller(ctx, req), req, in)
	})
}

func portableSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err)) // a programming error, caught by any test
	}
	singleTypes(s)
	return s
}

// singleTypes rewrites the nullable types ["null", X] in s as X.
func singleTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && slices.Contains(s.Types, "null") {
		s.Type = s.Types[0]
		if s.Type == "null" {
			s.Type = s.Types[1]
		}
		s.Types = nil
	}
	for _, p := range s.Properties {
		singleTypes(p)
	}
	for _, d := range s.Defs {
		singleTypes(d)
	}
	singleTypes(s.Items)
	singleTypes(s.AdditionalProperties)
}

func (s *Server) addTools() {

	// Templates and sandboxes.
	add(s, tool("list_snapshots", "List snapshots",
		"List the snapshots (warm templates) that sandboxes can be spawned from, with their tags, sizes and how many ready sandboxes each keeps pooled. Use a tag with spawn_sandboxes or create_sandbox.",
		readOnly()), s.listSnapshots)
	s.addTemplateTools()
	s.addMetricsTools()
	add(s, tool("create_sandbox", "Create a sandbox",
		"Create one new isolated Linux sandbox (Debian with python3, node, git) and return its id and token. Start from a snapshot tag (fast, see list_snapshots) or cold from an image. It reaches no network unless network allows it: e.g. {\"presets\": [\"pypi\"]} to pip install, {\"allow_domains\": [\"example.org\"]} for a site; a snapshot's children take its policy. This session remembers the token, so later calls can omit sandbox_token. For a quick command without managing a sandbox, sandbox_run is simpler.",
		hints{}), s.createSandbox)
	add(s, tool("spawn_sandboxes", "Spawn sandboxes from a snapshot",
		"Start n sandboxes (default 1, up to the daemon's max_n) from one snapshot, each an independent copy-on-write child with the snapshot's files, warm processes and network policy (network replaces that policy). Use it to run attempts in parallel. Returns every sandbox's id and token; this session remembers the tokens.",
		hints{}), s.spawnSandboxes)
	add(s, tool("branch_sandbox", "Branch a running sandbox",
		"Fork a running sandbox: save its full state (files, processes, Python interpreter) as a new snapshot while it keeps running, and start n children from it (default 1). Children start where the source is now, with its network policy unless network gives another, and then diverge. Reports how long the source was paused (pause_ms). Returns the children's ids and tokens; this session remembers them.",
		hints{}), s.branchSandbox)
	add(s, tool("snapshot_sandbox", "Save a sandbox as a snapshot",
		"Save a running sandbox's full state as a named snapshot, without starting children. The sandbox keeps running. Spawn from the snapshot later with spawn_sandboxes.",
		hints{}), s.snapshotSandbox)
	add(s, tool("list_sandboxes", "List sandboxes",
		"List the sandboxes alive on the daemon: id, status, snapshot, size, and seconds until each expires. session_has_token says whether this session can use a sandbox without passing sandbox_token. Never shows tokens.",
		readOnly()), s.listSandboxes)
	add(s, tool("get_sandbox", "Get a sandbox",
		"Show one sandbox: status, snapshot, size, seconds until it expires, its network policy and its exposed ports (with their URLs). Never shows its token.",
		readOnly()), s.getSandbox)
	add(s, tool("extend_sandbox", "Extend a sandbox's lifetime",
		"Make a sandbox expire ttl_secs from now instead of at its current expiry, to keep working in it. Up to the daemon's max_ttl_secs (get_service_info).",
		hints{idempotent: true}), s.extendSandbox)
	add(s, tool("kill_sandbox", "Kill a sandbox",
		"Destroy a sandbox now, with everything in it. Cannot be undone. Do this when done with a sandbox so it stops counting against the limits.",
		hints{destructive: true, idempotent: true}), s.killSandbox)
	add(s, tool("set_network", "Set a sandbox's network policy",
		"Replace a running sandbox's egress policy, at once for its new connections and DNS lookups: it may reach the names in allow_domains (example.org, or *.example.org for every name below it), the addresses in allow_cidrs and what the presets allow (get_service_info lists them, e.g. pypi, npm, github), less deny_domains and deny_cidrs. Every list empty denies everything. The host, other sandboxes and private addresses stay out of reach unless allow_cidrs names them. Returns the sandbox with its new policy.",
		hints{idempotent: true}), s.setNetwork)

	// Running code.
	add(s, tool("exec_command", "Run a command in a sandbox",
		"Run a command in a sandbox and return its stdout, stderr and exit code. Give command (a shell string run by /bin/sh -c, pipes and redirects allowed) or args (an argv list, no shell). Runs in /work unless cwd is set. Output over 64 KiB per stream is cut, keeping the start and the end; redirect large output to a file and page through it with read_file. background=true starts it as a background process (a server, a long job) and returns at once with its pid (tag names it too): read its output with read_process_output, write its stdin with write_process_stdin, stop it with signal_process.",
		hints{destructive: true}), s.execCommand)
	add(s, tool("eval_code", "Evaluate Python in a sandbox",
		"Evaluate Python code in the sandbox's warm, persistent interpreter: variables, imports and functions defined by one call stay for the next. The value of a final expression is returned as result (its repr); print output comes back as stdout; an exception comes back as error with exit_code 1. Faster than exec_command for Python.",
		hints{destructive: true}), s.evalCode)
	add(s, tool("sandbox_run", "Run a command in this session's sandbox",
		"Run a shell command in this session's own sandbox, creating it on first use and reusing it after, so files and installs persist between calls. The simplest way to run anything isolated from the host. Returns stdout, stderr, exit code and the sandbox_id (usable with every other tool, without a sandbox_token). The sandbox is killed when this MCP session ends; if it expired meanwhile, a fresh one is made and the result says so.",
		hints{destructive: true}), s.sandboxRun)

	// Files.
	add(s, tool("write_file", "Write a file in a sandbox",
		"Create or replace a file in a sandbox, creating parent directories. content is UTF-8 text, or base64 with encoding=base64 for binary data. Relative paths are under /work.",
		hints{destructive: true, idempotent: true}), s.writeFile)
	add(s, tool("read_file", "Read a file in a sandbox",
		"Read a file from a sandbox, at most 64 KiB per call: pass offset (and limit) to page through bigger files; the result gives next_offset and says when the end was reached. Text comes back as text; binary data as base64 with its mime type; PNG, JPEG, GIF and WebP images up to 4 MiB come back as an image.",
		readOnly()), s.readFile)
	add(s, tool("list_files", "List files in a sandbox",
		"List a directory in a sandbox (default /work), descending depth levels (default 1): path, type, size, mode, modification time.",
		readOnly()), s.listFiles)
	add(s, tool("wait_for_text", "Wait for text in a file",
		"Block until a file in a sandbox contains the given text, or timeout_secs pass (default 30). Use it to wait for a background command's log line such as 'listening on' or a marker your script writes when done. found=false means it timed out.",
		readOnly()), s.waitForText)
	s.addFSTools()
	s.addProcTools()
	s.addPauseTools()

	// Health, network and the service.
	add(s, tool("ping_sandbox", "Ping a sandbox",
		"Check that a sandbox is alive and its agent answers; reports the round-trip latency and uptime.",
		readOnly()), s.pingSandbox)
	add(s, tool("expose_port", "Expose a port",
		"Get a URL that reaches a server listening on a port inside a sandbox, such as a dev server to show the user. Start the server first, in the background and listening on 0.0.0.0 (not 127.0.0.1): exec_command background=true with e.g. `python3 -m http.server 8000 --bind 0.0.0.0`, then read_process_output until it says it serves. Returns url and token: send the token in the X-Cove-Preview-Token header (curl -H), or open browser_url, which carries it, in a browser. public=true needs no token. Calling it again returns the same token; the URL dies with the sandbox. A port nothing listens on answers 502.",
		hints{idempotent: true}), s.exposePort)
	add(s, tool("get_usage", "Get usage and remaining quota",
		"Show how many sandboxes are alive against the daemon's limit, how many more can be made, the per-sandbox limits, the sandboxes this session made with their expiry, and (metered) the tenant's use over a range (from, to; default this UTC month): sandbox_seconds, vcpu_seconds, gib_seconds, bytes_in, bytes_out and execs in total, by template and by sandbox, with its quota and what remains of it.",
		readOnly()), s.getUsage)
	add(s, tool("get_service_info", "Get service info",
		"Show the cove daemon's version, isolation backend and why it was chosen, default image, network (what sandboxes may reach, the preset policies) and limits (lifetime, CPUs, memory, sandboxes, batch size).",
		readOnly()), s.getServiceInfo)
}
