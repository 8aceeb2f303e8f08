// mcp-auth-proxy.mjs PORT TARGET: listens on 127.0.0.1:PORT and forwards
// every request to TARGET's host with "Authorization: Bearer $COVE_API_KEY"
// added, streaming both ways.
//
// The MCP conformance suite cannot send an API key; this lets it test the
// daemon's real /mcp behind its real auth. The Host and Origin headers pass
// through unchanged, so the DNS-rebinding scenario still tests the daemon.
import http from 'node:http';

const [port, target] = process.argv.slice(2);
const t = new URL(target);
const key = process.env.COVE_API_KEY || process.env.COVE_TOKEN;
if (!port || !target || !key) {
  console.error('usage: COVE_API_KEY=KEY node mcp-auth-proxy.mjs PORT TARGET_URL');
  process.exit(2);
}

http.createServer((req, res) => {
  const up = http.request({
    host: t.hostname,
    port: t.port,
    method: req.method,
    path: req.url,
    headers: { ...req.headers, authorization: `Bearer ${key}` },
  }, (r) => {
    res.writeHead(r.statusCode, r.headers);
    r.pipe(res);
  });
  up.on('error', (e) => {
    if (!res.headersSent) res.writeHead(502);
    res.end(String(e));
  });
  req.pipe(up);
  // A client that goes away (an SSE stream it is done with) ends the
  // upstream request too.
  res.on('close', () => up.destroy());
}).listen(Number(port), '127.0.0.1');
