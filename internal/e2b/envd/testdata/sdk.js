// Drives the published e2b SDK (its path in E2B_SDK) against the envd
// facade behind a stub control plane; every result is checked. Prints OK.
const assert = require('node:assert/strict')
const { Sandbox, CommandExitError, NotFoundError } = require(process.env.E2B_SDK)
const dir = process.env.TEST_DIR

async function until(what, f, ms = 10000) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await f()) return
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error('timed out waiting for ' + what)
}

;(async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60000 })

  const r = await sbx.commands.run('echo hi; echo err >&2', { envs: { A: 'b' } })
  assert.equal(r.stdout, 'hi\n')
  assert.equal(r.stderr, 'err\n')
  assert.equal(r.exitCode, 0)
  assert.equal((await sbx.commands.run('echo $A', { envs: { A: 'b' } })).stdout, 'b\n')
  await assert.rejects(sbx.commands.run('echo no >&2; exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3 && e.stderr === 'no\n')

  let out = ''
  const h = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => { out += d } })
  await sbx.commands.sendStdin(h.pid, 'ping\n')
  await until('the echo of stdin', () => out.includes('ping\n'))
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === h.pid && p.cmd === '/bin/bash'), JSON.stringify(procs))
  let seen = ''
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => { seen += d } })
  await sbx.commands.sendStdin(h.pid, 'again\n')
  await until('output on the connected handle', () => seen.includes('again\n'))
  await sbx.commands.closeStdin(h.pid)
  const hr = await h.wait()
  assert.equal(hr.exitCode, 0)
  assert.equal(hr.stdout, 'ping\nagain\n')
  await c.wait()
  const k = await sbx.commands.run('sleep 100', { background: true })
  assert.equal(await sbx.commands.kill(k.pid), true)
  await assert.rejects(k.wait(), (e) => e instanceof CommandExitError)
  assert.equal(await sbx.commands.kill(k.pid), false)

  let term = ''
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { term += Buffer.from(d).toString() } })
  await sbx.pty.resize(pty.pid, { cols: 120, rows: 40 })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo mark-$((6*7))\n'))
  await until('terminal output', () => term.includes('mark-42'))
  assert.ok(term.includes('40 120'), term)
  assert.equal(await sbx.pty.kill(pty.pid), true)

  const f = dir + '/sub/a.txt'
  const w = await sbx.files.write(f, 'hello')
  assert.equal(w.path, f)
  assert.equal(await sbx.files.read(f), 'hello')
  const bin = new Uint8Array(3 << 20).map((_, i) => (i * 7) & 0xff)
  await sbx.files.write(dir + '/bin', bin.buffer)
  assert.deepEqual(await sbx.files.read(dir + '/bin', { format: 'bytes' }), bin)
  if (process.env.E2B_SDK_NEW === '1') {
    // gzip both ways: an application/octet-stream upload (envd 0.5.7)
    // with Content-Encoding gzip, and a gzip download.
    await sbx.files.write(dir + '/gz', bin.buffer, { gzip: true })
    assert.deepEqual(await sbx.files.read(dir + '/gz', { format: 'bytes', gzip: true }), bin)
    await sbx.files.remove(dir + '/gz')
  }
  assert.equal(await sbx.files.exists(f), true)
  assert.equal(await sbx.files.exists(dir + '/nope'), false)
  const info = await sbx.files.getInfo(f)
  assert.equal(info.size, 5)
  assert.equal(info.type, 'file')
  assert.equal(await sbx.files.makeDir(dir + '/d'), true)
  assert.equal(await sbx.files.makeDir(dir + '/d'), false)
  const names = (await sbx.files.list(dir)).map((e) => e.name).sort()
  assert.deepEqual(names, ['bin', 'd', 'sub'])
  await sbx.files.rename(f, dir + '/d/b.txt')
  assert.equal(await sbx.files.read(dir + '/d/b.txt'), 'hello')
  await sbx.files.remove(dir + '/d')
  assert.equal(await sbx.files.exists(dir + '/d'), false)
  await assert.rejects(sbx.files.read(dir + '/nope'), (e) => e instanceof NotFoundError)

  const events = []
  const wh = await sbx.files.watchDir(dir, (e) => events.push(e.name + ':' + e.type), { recursive: true })
  await sbx.files.write(dir + '/sub/watched.txt', 'x')
  await until('a watch event', () => events.some((e) => e.startsWith('sub/watched.txt:')))
  await wh.stop()

  // With E2B_SANDBOX_URL the SDK's signed URLs name no sandbox: a host
  // 49983-ID.<domain> (E2B's own) does, which this request stands in for.
  const signedFetch = (url, init = {}) => fetch(url, { ...init, headers: { ...init.headers, 'E2b-Sandbox-Id': sbx.sandboxId } })
  const res = await signedFetch(await sbx.downloadUrl(dir + '/bin', { useSignatureExpiration: 60 }))
  assert.equal(res.status, 200)
  assert.deepEqual(new Uint8Array(await res.arrayBuffer()), bin)
  const fd = new FormData()
  fd.append('file', new Blob(['uploaded']), 'up.txt')
  const up = await signedFetch(await sbx.uploadUrl(dir + '/up.txt'), { method: 'POST', body: fd })
  assert.equal(up.status, 200)
  assert.equal(await sbx.files.read(dir + '/up.txt'), 'uploaded')
  const bad = await signedFetch((await sbx.downloadUrl(dir + '/bin')).replace('signature=v1_', 'signature=v1_x'))
  assert.equal(bad.status, 401)

  await sbx.kill()
  console.log('OK')
})().catch((e) => {
  console.error(e)
  process.exit(1)
})
