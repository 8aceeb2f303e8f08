// Package envd serves E2B's in-sandbox API ("envd") as a facade over cove's
// own data-plane API: every call goes through pkg/client, to cove's API on
// loopback, with the access token the SDK sends (X-Access-Token) as the
// sandbox token, so cove checks it; nothing here talks to an agent.
//
// A request names its sandbox with E2b-Sandbox-Id (the SDK sends it with
// E2B_SANDBOX_URL), or else by a host PORT-ID.<domain> as E2B's own hosts
// do. The user comes from Authorization: Basic base64("user:") on RPCs and
// from ?username= on /files; none means the sandbox's defaults (its user,
// its working directory, where relative paths then start too); a named
// user's relative paths and commands start at its home (/root, /home/NAME).
//
// Served, over Connect with the JSON codec (unary application/json, server
// streams application/connect+json ending with the end-of-stream frame) on
// HTTP/1.1 and h2c, and the binary codec too:
//
//   - process.Process: Start (start{pid}, then data{stdout|stderr|pty},
//     keepalives at the client's Keepalive-Ping-Interval, end{exitCode,
//     exited, status, error}); stdin:false is stdin closed at start. Connect
//     streams what a running process writes from then on. List, SendInput,
//     StreamInput, SendSignal (TERM, KILL), CloseStdin, Update (a terminal's
//     size); processes by pid or tag. Pipes are cove's background processes
//     (/v1/sandboxes/{id}/processes); a PTY is one of cove's terminals (the
//     /pty WebSocket) that the facade holds open until it ends or is killed.
//   - filesystem.Filesystem: Stat, ListDir (depth), MakeDir (already_exists
//     for an existing path), Move (over an existing target, as rename(2)),
//     Remove (recursive), WatchDir (recursive; includeEntry), and polling
//     watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher) held by the
//     facade, each for the token that made it.
//   - GET /files (gzip when accepted), POST /files (multipart "file" parts,
//     each part's filename its path; or application/octet-stream, gzip
//     Content-Encoding too), both also by signed URL: "v1_" + the unpadded
//     base64 SHA-256 of path:operation:user:token[:expiry], as the SDK
//     computes it, checked against the token Config.Token returns. Errors
//     as envd's {"code": status, "message"}. GET /health answers 204.
//
// Connect codes the SDK relies on: not_found (no such path, process or
// sandbox), already_exists, unauthenticated (a missing or wrong token),
// unavailable (the sandbox is dead or paused), invalid_argument.
//
// Where it differs from E2B's envd:
//   - A PTY's pid is a handle the facade assigns (from 4194305 up), since
//     cove's terminals report none; it is valid for this facade only, and
//     ends with the daemon.
//   - File metadata (X-Metadata-* on upload, EntryInfo.metadata; envd
//     0.6.2) is not kept: cove has no extended attributes API yet, so
//     EnvdVersion stays below it and the SDK refuses metadata itself.
//     Entries carry no owner or group.
//   - With E2B_SANDBOX_URL set, the SDK's downloadUrl and uploadUrl are that
//     URL and name no sandbox: fetched as they are they answer 400; they
//     work through a host PORT-ID.<domain> routed here, or with the
//     E2b-Sandbox-Id header.
//   - StreamInput needs a client stream, which the SDK (fetch over
//     HTTP/1.1) never opens; it works over h2c.
package envd
