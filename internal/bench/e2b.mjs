// cove bench's E2B row: N times Sandbox.create then a first
// commands.run("true") through the published SDK (its module path in
// argv[2]), configured by E2B_* alone; one JSON line of the samples (ms).
const { Sandbox } = await import(process.argv[2]);
const n = Number(process.argv[3]);
const ms = [];
for (let i = 0; i < n; i++) {
  const t0 = performance.now();
  const sbx = await Sandbox.create();
  const r = await sbx.commands.run("true");
  ms.push(performance.now() - t0);
  if (r.exitCode !== 0) throw new Error("true exited " + r.exitCode);
  await sbx.kill();
}
console.log(JSON.stringify({ ms }));
