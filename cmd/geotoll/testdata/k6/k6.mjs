// A stand-in for k6's JavaScript API, enough to run geotoll's k6 scripts
// under node against a real server (TestK6Scripts): requests are made
// synchronously, as k6 makes them, and every request, check and metric
// sample is recorded in globalThis.k6run, with the custom metrics declared
// (type and whether they hold times).
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const fetcher = fileURLToPath(new URL('./fetch.mjs', import.meta.url));
const run = (globalThis.k6run ??= { requests: [], checks: [], samples: [], metrics: {}, expected: null });

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
  // k6's http_req_duration sample of the request is its timings.duration.
  run.requests.push({ method, url, status: res.status, tags: params.tags || {}, failed, duration: res.duration });
  return { status: res.status, headers, body: res.body, timings: { duration: res.duration } };
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

// new Trend(name, isTime), and so on: isTime says the values are times (ms).
class Metric {
  constructor(name, isTime = false) {
    this.name = name;
    run.metrics[name] = { type: this.constructor.name.toLowerCase(), isTime: Boolean(isTime) };
  }
  add(value, tags = {}) { run.samples.push({ metric: this.name, value: Number(value), tags }); }
}
export class Rate extends Metric {}
export class Trend extends Metric {}
export class Counter extends Metric {}
