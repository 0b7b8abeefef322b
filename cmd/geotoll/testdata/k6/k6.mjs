// A stand-in for k6's JavaScript API, enough to run geotoll's k6 scripts
// under node against a real server (TestK6Scripts): requests are made
// synchronously, as k6 makes them, and every request, check and metric
// sample is recorded in globalThis.k6run.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const fetcher = fileURLToPath(new URL('./fetch.mjs', import.meta.url));
const run = (globalThis.k6run ??= { requests: [], checks: [], samples: [], expected: null });

// k6 names headers as Go does: each dash-separated word capitalised.
function canonical(name) {
  return name.split('-').map((w) => w.charAt(0).toUpperCase() + w.slice(1).toLowerCase()).join('-');
}

function request(method, url, body, params = {}) {
  const out = execFileSync(process.execPath, [fetcher, method, url, JSON.stringify(params.headers || {}), body ?? ''], { encoding: 'utf8' });
  const res = JSON.parse(out);
  const headers = {};
  for (const [k, v] of Object.entries(res.headers)) headers[canonical(k)] = v;
  const failed = run.expected ? !run.expected.includes(res.status) : res.status >= 400;
  run.requests.push({ method, url, status: res.status, tags: params.tags || {}, failed });
  return { status: res.status, headers, body: res.body };
}

export const http = {
  get: (url, params) => request('GET', url, null, params),
  post: (url, body, params) => request('POST', url, body, params),
  expectedStatuses: (...statuses) => ({ statuses }),
  setResponseCallback: (cb) => { run.expected = cb.statuses; },
};

export function check(value, checks, tags = {}) {
  let all = true;
  for (const [name, fn] of Object.entries(checks)) {
    const ok = Boolean(fn(value));
    run.checks.push({ name, ok, status: value.status, tags });
    all &&= ok;
  }
  return all;
}

class Metric {
  constructor(name) { this.name = name; }
  add(value, tags = {}) { run.samples.push({ metric: this.name, value: Number(value), tags }); }
}
export class Rate extends Metric {}
export class Trend extends Metric {}
export class Counter extends Metric {}
