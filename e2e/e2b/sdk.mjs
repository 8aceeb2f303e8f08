// The published E2B SDK against cove, unmodified: configured only by
// E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY and E2B_DOMAIN (and
// NODE_EXTRA_CA_CERTS for cove's CA). e2e/e2b_test.go runs it with the
// SDK's module path in COVE_E2B_MODULE and a mode:
//   full  everything the facade serves (SDK 2.51, v2 routes)
//   v1    create, commands and files (an older SDK, v1 routes)
//   auth  a wrong API key, an unknown sandbox
//   template  Template().fromTemplate('base') with a COPY of a local file,
//         a RUN and an ENV, Template.build, then a sandbox of it (SDK 2.51)
//   other COVE_E2B_FOREIGN (a sandbox id of another tenant) is not found,
//         and listing shows none of that tenant's sandboxes
// Each step prints "ok NAME MS"; the first failure exits 1 with its reason.
import fs from "node:fs";
import https from "node:https";
import os from "node:os";
import path from "node:path";

const e2b = await import(process.env.COVE_E2B_MODULE);
const { Sandbox, Template, CommandExitError, AuthenticationError, NotFoundError } = e2b;
const mode = process.argv[2] || "full";
const run = process.env.COVE_E2B_RUN || String(Date.now());

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}

async function step(name, f) {
  const t0 = Date.now();
  try {
    const r = await f();
    console.log(`ok ${name} ${Date.now() - t0}ms`);
    return r;
  } catch (e) {
    console.error(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
  }
}

async function rejects(f, cls, what) {
  try {
    await f();
  } catch (e) {
    check(e instanceof cls, `${what}: want ${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e}`);
    return e;
  }
  throw new Error(`${what}: did not fail`);
}

// getHTTPS fetches https://HOST/ with HOST exactly as getHost gave it (its
// name in SNI and Host, trusted through NODE_EXTRA_CA_CERTS); only the
// name's resolution is the test's: *.localhost resolves to loopback in
// browsers, not in this machine's resolver.
function getHTTPS(host) {
  const [hostname, port] = host.split(":");
  const lookup = (_h, o, cb) => (o && o.all ? cb(null, [{ address: "127.0.0.1", family: 4 }]) : cb(null, "127.0.0.1", 4));
  return new Promise((resolve, reject) => {
    const req = https.get({ hostname, port: port || 443, path: "/index.html", lookup, timeout: 5000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => { body += d; });
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, f, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await f()) return;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(100);
  }
}

// createRunFiles is the part every SDK generation runs.
async function createRunFiles() {
  const sbx = await step("Sandbox.create", () =>
    Sandbox.create({ metadata: { suite: "e2b", run }, envs: { GREETING: "hello" }, timeoutMs: 600_000 }));
  check(/^sb-[0-9a-f]{12}$/.test(sbx.sandboxId), "sandbox id " + sbx.sandboxId);

  await step("commands.run", async () => {
    const r = await sbx.commands.run("echo $GREETING; echo oops >&2; whoami");
    check(r.exitCode === 0, "exit code " + r.exitCode);
    check(r.stdout === "hello\nuser\n", "stdout " + JSON.stringify(r.stdout));
    check(r.stderr === "oops\n", "stderr " + JSON.stringify(r.stderr));
  });
  await step("commands.run failing → CommandExitError", async () => {
    const e = await rejects(() => sbx.commands.run("echo out; echo bad >&2; exit 3"), CommandExitError, "exit 3");
    check(e.exitCode === 3 && e.stdout === "out\n" && e.stderr === "bad\n", `error ${e.exitCode} ${JSON.stringify(e.stdout)} ${JSON.stringify(e.stderr)}`);
  });

  await step("files.write/read text", async () => {
    const info = await sbx.files.write("/home/user/hello.txt", "hi there\n");
    check(info.path === "/home/user/hello.txt", "write info " + JSON.stringify(info));
    check((await sbx.files.read("/home/user/hello.txt")) === "hi there\n", "read back");
  });
  await step("files.write/read binary 50 MiB", async () => {
    const big = new Uint8Array(50 << 20);
    for (let i = 0; i < big.length; i += 4096) big[i] = (i / 4096) & 0xff;
    big[big.length - 1] = 0xab;
    await sbx.files.write("/home/user/big.bin", big);
    const back = await sbx.files.read("/home/user/big.bin", { format: "bytes" });
    check(back.length === big.length, "length " + back.length);
    for (let i = 0; i < big.length; i += 4096) check(back[i] === big[i], "byte " + i);
    check(back[back.length - 1] === 0xab, "last byte");
    const r = await sbx.commands.run("stat -c %s /home/user/big.bin");
    check(r.stdout.trim() === String(50 << 20), "size in the sandbox " + r.stdout);
  });
  await step("files.list/makeDir/rename/remove/exists/getInfo", async () => {
    check((await sbx.files.makeDir("/home/user/d/e")) === true, "makeDir new");
    check((await sbx.files.makeDir("/home/user/d/e")) === false, "makeDir again");
    await sbx.files.write("/home/user/d/a.txt", "a");
    const names = (await sbx.files.list("/home/user/d")).map((e) => e.name).sort();
    check(JSON.stringify(names) === JSON.stringify(["a.txt", "e"]), "list " + names);
    const moved = await sbx.files.rename("/home/user/d/a.txt", "/home/user/d/b.txt");
    check(moved.path === "/home/user/d/b.txt", "rename " + JSON.stringify(moved));
    check(!(await sbx.files.exists("/home/user/d/a.txt")) && (await sbx.files.exists("/home/user/d/b.txt")), "exists after rename");
    const info = await sbx.files.getInfo("/home/user/d/b.txt");
    check(info.type === "file" && info.size === 1 && info.name === "b.txt", "getInfo " + JSON.stringify(info));
    await sbx.files.remove("/home/user/d");
    check(!(await sbx.files.exists("/home/user/d")), "removed");
  });
  return sbx;
}

async function full() {
  const sbx = await createRunFiles();

  await step("commands.run background: onStdout, sendStdin, list, connect, kill", async () => {
    let out = "";
    const h = await sbx.commands.run("while read l; do echo got:$l; done", {
      background: true, stdin: true, onStdout: (d) => { out += d; },
    });
    check(h.pid > 0, "pid " + h.pid);
    await sbx.commands.sendStdin(h.pid, "one\n");
    await until("echo of stdin", () => out.includes("got:one\n"));
    const procs = await sbx.commands.list();
    check(procs.some((p) => p.pid === h.pid), "list has " + h.pid + ": " + JSON.stringify(procs.map((p) => p.pid)));
    let again = "";
    const c = await sbx.commands.connect(h.pid, { onStdout: (d) => { again += d; } });
    await sbx.commands.sendStdin(h.pid, "two\n");
    await until("connected output", () => again.includes("got:two\n"));
    check(await h.kill(), "kill");
    const res = await c.wait().catch((e) => e);
    check(res instanceof CommandExitError || (res && res.exitCode !== 0), "killed command ended: " + res);
  });

  await step("pty.create, sendInput, resize", async () => {
    let out = "";
    const dec = new TextDecoder();
    const p = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d); } });
    await sbx.pty.sendInput(p.pid, new TextEncoder().encode("stty size; echo pty-$((6*7))\n"));
    await until("pty output", () => out.includes("pty-42") && out.includes("24 80"));
    await sbx.pty.resize(p.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(p.pid, new TextEncoder().encode("stty size\n"));
    await until("resized", () => out.includes("30 100"));
    await sbx.pty.kill(p.pid);
  });

  await step("files.watchDir", async () => {
    await sbx.files.makeDir("/home/user/w");
    const events = [];
    const w = await sbx.files.watchDir("/home/user/w", (ev) => events.push(ev), { recursive: true });
    await sbx.files.write("/home/user/w/new.txt", "x");
    await until("a watch event for new.txt", () => events.some((e) => e.name.endsWith("new.txt")));
    await w.stop();
  });

  await step("getHost(8000): https fetch of a page served inside", async () => {
    await sbx.files.write("/home/user/site/index.html", "hello from cove " + run);
    const srv = await sbx.commands.run("cd /home/user/site && exec python3 -m http.server 8000", { background: true });
    const host = sbx.getHost(8000);
    check(host === `8000-${sbx.sandboxId}.${process.env.E2B_DOMAIN}`, "host " + host);
    let last = "";
    await until("the page over https://" + host, async () => {
      try {
        const r = await getHTTPS(host);
        last = `${r.status} ${r.body}`;
        return r.status === 200 && r.body === "hello from cove " + run;
      } catch (e) {
        last = String(e);
        return false;
      }
    }, 20000).catch((e) => { throw new Error(e.message + ": last " + last); });
    await srv.kill();
  });

  await step("setTimeout", async () => {
    await sbx.setTimeout(900_000);
    const info = await sbx.getInfo();
    const left = info.endAt.getTime() - Date.now();
    check(left > 800_000 && left < 1_000_000, "ends in " + left + " ms");
    check(info.metadata.run === run && info.templateId === "base", "info " + JSON.stringify(info));
  });

  await step("Sandbox.list with a metadata filter", async () => {
    const other = await Sandbox.create({ metadata: { suite: "e2b", run: run + "-other" } });
    const page = await Sandbox.list({ query: { metadata: { run } } }).nextItems();
    check(page.length === 1 && page[0].sandboxId === sbx.sandboxId, "list " + JSON.stringify(page.map((s) => s.sandboxId)));
    check(await other.kill(), "kill other");
  });

  await step("getMetrics", async () => {
    const m = await sbx.getMetrics();
    check(m.length >= 1 && m[0].cpuCount >= 1 && m[0].memTotal > 0, "metrics " + JSON.stringify(m));
  });

  await step("fork", async () => {
    await sbx.files.write("/home/user/fork.txt", "before fork");
    const kids = await sbx.fork({ count: 1 });
    check(kids.length === 1 && !(kids[0] instanceof Error), "fork " + kids);
    const kid = kids[0];
    check(kid.sandboxId !== sbx.sandboxId, "a new id");
    check((await kid.files.read("/home/user/fork.txt")) === "before fork", "child's files");
    await kid.files.write("/home/user/fork.txt", "child");
    check((await sbx.files.read("/home/user/fork.txt")) === "before fork", "parent untouched");
    check(await kid.kill(), "kill child");
  });

  await step("wrong access token → AuthenticationError", async () => {
    // The sandbox as the SDK builds it from a create answer, with another
    // token: envd refuses every call.
    const bad = new Sandbox({ sandboxId: sbx.sandboxId, sandboxDomain: sbx.sandboxDomain, envdVersion: "0.5.7",
      envdAccessToken: "0".repeat(48) });
    await rejects(() => bad.commands.run("true"), AuthenticationError, "commands.run");
    await rejects(() => bad.files.read("/etc/hostname"), AuthenticationError, "files.read");
  });

  await step("pause, then connect: memory and files kept", async () => {
    const bg = await sbx.commands.run("sleep 3600", { background: true });
    await sbx.files.write("/home/user/paused.txt", "kept");
    check((await sbx.betaPause()) === true, "pause");
    check((await Sandbox.pause(sbx.sandboxId)) === false, "second pause → already paused");
    const info = await Sandbox.getInfo(sbx.sandboxId);
    check(info.state === "paused", "state " + info.state);
    const back = await Sandbox.connect(sbx.sandboxId);
    check((await back.files.read("/home/user/paused.txt")) === "kept", "file after resume");
    const procs = await back.commands.list();
    check(procs.some((p) => p.pid === bg.pid), "process after resume: " + JSON.stringify(procs.map((p) => p.pid)));
  });

  await step("kill", async () => {
    check((await sbx.kill()) === undefined || true, "kill");
    await rejects(() => Sandbox.getInfo(sbx.sandboxId), NotFoundError, "getInfo after kill");
    check((await Sandbox.kill(sbx.sandboxId)) === false, "kill again → false");
  });
}

async function v1() {
  const sbx = await createRunFiles();
  await step("kill", async () => {
    check((await Sandbox.kill(sbx.sandboxId)) === true, "kill");
  });
}

async function auth() {
  await step("wrong X-API-KEY → AuthenticationError", () =>
    rejects(() => Sandbox.create({ apiKey: "e2b_" + "0".repeat(64) }), AuthenticationError, "create"));
  await step("wrong X-API-KEY on list → AuthenticationError", () =>
    rejects(() => Sandbox.list({ apiKey: "e2b_" + "0".repeat(64) }).nextItems(), AuthenticationError, "list"));
  await step("unknown sandbox → NotFoundError", () =>
    rejects(() => Sandbox.getInfo("sb-000000000000"), NotFoundError, "getInfo"));
  await step("unknown sandbox connect → NotFoundError", () =>
    rejects(() => Sandbox.connect("sb-000000000000"), NotFoundError, "connect"));
}

async function template() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cove-e2b-tmpl-"));
  const content = "copied by the SDK " + run + "\n";
  fs.writeFileSync(path.join(dir, "hello.txt"), content);
  const name = "e2b-" + run;
  const logs = [];
  await step("Template.build", async () => {
    const t = Template({ fileContextPath: dir })
      .fromTemplate("base")
      .runCmd("mkdir -p /opt/e2b && echo built-by-run > /opt/e2b/run.txt")
      .copy("hello.txt", "/opt/e2b/hello.txt")
      .setEnvs({ COVE_TMPL: "from-template", COVE_RUN: run });
    const b = await Template.build(t, name, { onBuildLogs: (e) => logs.push(e.message) });
    check(b.templateId === name && b.buildId, "build " + JSON.stringify(b));
    const all = logs.join("\n");
    check(all.includes("Uploaded 'hello.txt'"), "upload logged: " + all);
    check(/\[\d+\/\d+\] RUN/.test(all) && all.includes("cove: template " + name + " built"), "cove's progress in the logs: " + all);
  });
  await step("Template.exists", async () => {
    check((await Template.exists(name)) === true, "exists " + name);
    check((await Template.exists("e2b-none-" + run)) === false, "an unknown name does not exist");
  });
  await step("Template.build with a failing RUN → BuildError", async () => {
    const bad = Template({ fileContextPath: dir }).fromTemplate("base").runCmd("echo nope >&2; exit 3");
    const e = await rejects(() => Template.build(bad, name + "-bad"), e2b.BuildError, "failing build");
    check(String(e.message).includes("exited 3"), "error names the exit: " + e.message);
  });
  await step("Sandbox.create(template): its file and env", async () => {
    const sbx = await Sandbox.create(name, { timeoutMs: 300_000 });
    check((await sbx.files.read("/opt/e2b/hello.txt")) === content, "copied file");
    const r = await sbx.commands.run("cat /opt/e2b/run.txt; echo $COVE_TMPL $COVE_RUN");
    check(r.stdout === "built-by-run\nfrom-template " + run + "\n", "stdout " + JSON.stringify(r.stdout));
    const info = await sbx.getInfo();
    check(info.templateId === name, "templateId " + info.templateId);
    check(await sbx.kill(), "kill");
  });
  await step("Sandbox.deleteSnapshot(template) deletes it", async () => {
    check((await Sandbox.deleteSnapshot(name)) === true, "delete");
    check((await Template.exists(name)) === false, "gone");
    check((await Sandbox.deleteSnapshot(name)) === false, "delete again → false");
  });
  fs.rmSync(dir, { recursive: true, force: true });
}

async function other() {
  const foreign = process.env.COVE_E2B_FOREIGN;
  check(foreign, "COVE_E2B_FOREIGN");
  await step("another tenant's sandbox → NotFoundError", async () => {
    await rejects(() => Sandbox.getInfo(foreign), NotFoundError, "getInfo");
    await rejects(() => Sandbox.connect(foreign), NotFoundError, "connect");
    check((await Sandbox.kill(foreign)) === false, "kill → not found");
  });
  await step("list shows none of another tenant's", async () => {
    const all = await Sandbox.list().nextItems();
    check(!all.some((s) => s.sandboxId === foreign), "listed " + foreign);
  });
}

await ({ full, v1, auth, template, other })[mode]();
console.log("done " + mode);
