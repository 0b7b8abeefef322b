// node run.mjs SCRIPT ITERATIONS: runs a k6 script's default function
// ITERATIONS times with the k6 stand-in and prints its options and what
// was recorded. __ENV comes from K6_ENV (JSON).
globalThis.__ENV = JSON.parse(process.env.K6_ENV || '{}');
const [script, iterations] = process.argv.slice(2);
const mod = await import(script);
for (let i = 0; i < Number(iterations); i++) mod.default();
process.stdout.write(JSON.stringify({ options: mod.options, ...globalThis.k6run }));
