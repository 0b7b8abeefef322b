// Unit tests of the preview page's script, app.js, run by node's test
// runner (`node --test web/app.test.mjs`; TestPreviewScript in package web
// runs them under go test). The script runs in a stub page: a vm context
// with a document of stub elements, a MapLibre that only records what it is
// given, and a fetch that answers what each test says. No server, no
// browser: what it checks is how the script reads the answers — the budget
// meter, the spent counter, the catalog. TestBrowserPreview (cmd/geotoll)
// runs the page for real in Chromium.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import vm from 'node:vm';

const SRC = readFileSync(new URL('./app.js', import.meta.url), 'utf8');
const ORIGIN = 'http://geotoll.test';

// The demo's anonymous tier: its bucket first, then its in-flight cap. The
// bucket refills so slowly (0.001 token/s) that the meter's estimate is
// what the server last said, to the token.
const POLICY = '"anonymous";q=100;qu="tokens";w=100000, "anonymous-concurrency";q=4;qu="concurrent-requests"';
const POLICY_V6 = POLICY + ', "anonymous-ipv6-/48";q=500;qu="tokens";w=500000';
const IANA = 'https://iana.org/assignments/http-problem-types#';

// answer is a response as geotoll sends it: budget headers named in h
// (policy, limit, cost, …) and a problem document for a status >= 400.
function answer(status, h = {}, problem = null) {
  const headers = new Headers();
  if (h.policy) headers.set('RateLimit-Policy', h.policy);
  if (h.limit) headers.set('RateLimit', h.limit);
  if (h.x) {
    headers.set('X-RateLimit-Limit', String(h.x[0]));
    headers.set('X-RateLimit-Remaining', String(h.x[1]));
    headers.set('X-RateLimit-Reset', String(h.x[2]));
  }
  if (h.cost !== undefined) headers.set('X-Request-Cost', String(h.cost));
  if (h.estimate !== undefined) headers.set('X-Request-Cost-Estimate', String(h.estimate));
  if (h.retryAfter !== undefined) headers.set('Retry-After', String(h.retryAfter));
  if (h.shadow) headers.set('X-RateLimit-Shadow', 'would-refuse');
  let body = null;
  if (status === 200) {
    headers.set('Content-Type', 'application/vnd.mapbox-vector-tile');
    body = new Uint8Array([0x1a, 0x00]);
  } else if (problem) {
    headers.set('Content-Type', 'application/problem+json');
    body = JSON.stringify({ status, ...problem });
  }
  return new Response(body, { status, headers });
}

// An admitted tile of the anonymous tier: r tokens left, cost charged.
const admitted = (r, cost, extra = {}) =>
  answer(200, { policy: POLICY, limit: `"anonymous";r=${r};t=${100 - r}`, x: [100, r, 100 - r], cost, ...extra });

function element(id) {
  let text = '';
  return {
    id, style: {}, dataset: {}, hidden: false, offsetWidth: 0,
    classList: { toggle() {}, add() {}, remove() {} },
    setAttribute() {}, addEventListener() {},
    append(...kids) { for (const k of kids) if (k && typeof k.textContent === 'string') text += k.textContent; },
    parentElement: { setAttribute() {} },
    get textContent() { return text; },
    set textContent(v) { text = String(v); },
  };
}

// page starts app.js in a stub page. catalog is the JSON /tiles answers
// (a string is sent as it is; undefined: 404), tile(path, n) the response
// to the n-th request of a tile path (from 1). It resolves once the map
// is made, with:
//
//	state        window.geotollState
//	text(id)     the text of the element with that id
//	count(name)  the text of a layer's [data-count] element
//	load(path)   MapLibre asking for geotoll://path: resolves to 'ok' or
//	             'error <status>', or 'aborted'; abortAfter: true aborts
//	             it once its first response is read (a 429 would else be
//	             retried after its Retry-After)
//	emit(e, ev)  a map event
//	run(code)    code evaluated in the page
async function page({ catalog, tile = () => answer(404) } = {}) {
  const els = new Map();
  const el = (key) => {
    if (!els.has(key)) els.set(key, element(key));
    return els.get(key);
  };
  const handlers = {};
  const asked = new Map();
  const abortAfter = new Map(); // signal -> its controller, aborted once answered
  let loadTile = null;
  let made;
  const started = new Promise((resolve) => { made = resolve; });
  const ctx = {
    console, URL, URLSearchParams, Headers, Response, AbortController, DOMException,
    setTimeout, clearTimeout,
    document: {
      getElementById: el,
      querySelector: (sel) => (sel.startsWith('[data-count=') ? el(sel) : null),
      createElement: () => element(''),
    },
    fetch: async (url, opts) => {
      const u = new URL(url, ORIGIN);
      if (u.pathname === '/tiles') {
        if (catalog === undefined) return answer(404);
        const body = typeof catalog === 'string' ? catalog : JSON.stringify(catalog);
        return new Response(body, { headers: { 'Content-Type': 'application/json' } });
      }
      if (u.pathname === '/budget') return answer(404);
      const n = (asked.get(u.pathname) || 0) + 1;
      asked.set(u.pathname, n);
      const resp = tile(u.pathname.slice(1), n);
      const ac = abortAfter.get(opts.signal);
      if (ac) ac.abort();
      return resp;
    },
    maplibregl: {
      addProtocol: (name, fn) => { loadTile = fn; },
      getVersion: () => 'stub',
      Map: function (opts) {
        this.options = opts;
        this.addControl = () => {};
        this.on = (e, fn) => { (handlers[e] ||= []).push(fn); };
        this.getSource = () => null;
        this.getLayer = () => null;
        this.getCenter = () => ({ lng: 0, lat: 0 });
        this.getZoom = () => 0;
        made();
      },
      NavigationControl: function () {},
      ScaleControl: function () {},
    },
  };
  ctx.window = ctx;
  ctx.location = { search: '', pathname: '/', hash: '', origin: ORIGIN };
  ctx.history = { replaceState() {} };
  ctx.requestAnimationFrame = (f) => f();
  ctx.setInterval = () => 0;
  vm.createContext(ctx);
  vm.runInContext(SRC, ctx, { filename: 'app.js' });
  await started;
  await new Promise((r) => setImmediate(r)); // the rest of start()
  return {
    state: ctx.geotollState,
    text: (id) => el(id).textContent,
    count: (name) => el(`[data-count="${name}"]`).textContent,
    run: (code) => vm.runInContext(code, ctx),
    emit: (e, ev) => (handlers[e] || []).forEach((fn) => fn(ev)),
    load(path, opts = {}) {
      const ac = new AbortController();
      if (opts.abortAfter) abortAfter.set(ac.signal, ac);
      return loadTile({ url: 'geotoll://' + path }, ac).then(
        () => 'ok',
        (err) => (err && err.name === 'AbortError' ? 'aborted' : 'error ' + err.status),
      );
    },
  };
}

// ---------------------------------------------------------------- meter --

test('meter: a refusal by the in-flight cap leaves the caller\'s bucket as it was', async () => {
  const p = await page({
    tile: (path) => (path.startsWith('tiles/places/9/1/')
      ? admitted(80, 0.5)
      : answer(429, {
        policy: POLICY, limit: '"anonymous-concurrency";r=0;t=1', x: [4, 0, 1], cost: 0.02, retryAfter: 1,
      }, { type: IANA + 'quota-exceeded', in_flight: 4, max_in_flight: 4, 'violated-policies': ['anonymous-concurrency'] })),
  });
  assert.equal(await p.load('tiles/places/9/1/1.mvt'), 'ok');
  assert.equal(p.state.remaining, 80);
  assert.equal(await p.load('tiles/places/9/2/1.mvt', { abortAfter: true }), 'aborted');
  assert.equal(p.state.lastStatus, 429);
  assert.equal(p.state.refused, 1);
  assert.equal(p.state.tier, 'anonymous');
  assert.equal(p.state.capacity, 100);
  assert.equal(p.state.remaining, 80, 'remaining is the bucket\'s, not the in-flight cap\'s r=0');
  assert.equal(p.state.reset, 20, 'reset is the bucket\'s, not the in-flight cap\'s t=1');
  assert.equal(p.text('remaining'), '80');
  assert.equal(p.text('capacity'), '100');
  assert.match(p.text('last-refused'), /^Refused places 9\/2\/1 \(cost 0\.02\): retry after 1 s/);
});

test('meter: a refusal by the IPv6 network\'s bucket leaves the caller\'s bucket as it was', async () => {
  const p = await page({
    tile: (path) => (path.startsWith('tiles/places/9/1/')
      ? answer(200, { policy: POLICY_V6, limit: '"anonymous";r=80;t=20', x: [100, 80, 20], cost: 0.5 })
      : answer(429, {
        policy: POLICY_V6, limit: '"anonymous-ipv6-/48";r=3;t=497', x: [500, 3, 497], cost: 6, retryAfter: 3,
      }, { type: IANA + 'quota-exceeded', cost: 6, remaining: 3.2, retry_after: 3, 'violated-policies': ['anonymous-ipv6-/48'] })),
  });
  assert.equal(await p.load('tiles/places/9/1/1.mvt'), 'ok');
  assert.equal(await p.load('tiles/places/9/2/1.mvt', { abortAfter: true }), 'aborted');
  assert.equal(p.state.refused, 1);
  assert.equal(p.state.tier, 'anonymous');
  assert.equal(p.state.capacity, 100);
  assert.equal(p.state.remaining, 80, 'remaining is the caller\'s bucket\'s, not the network\'s');
  assert.equal(p.state.reset, 20);
  assert.equal(p.text('remaining'), '80');
  assert.match(p.text('last-refused'), /\(cost 6\)/);
});

test('meter: the caller\'s bucket is read from its RateLimit member wherever it stands', async () => {
  const p = await page({
    tile: (path) => {
      if (path.startsWith('tiles/places/9/1/')) {
        return answer(200, { policy: POLICY, limit: '"anonymous-concurrency";r=0;t=1, "anonymous";r=42;t=58', cost: 0.5 });
      }
      // A server that sends only X-RateLimit-*.
      return answer(200, { x: [50, 7, 43], cost: 0.5 });
    },
  });
  assert.equal(await p.load('tiles/places/9/1/1.mvt'), 'ok');
  assert.deepEqual([p.state.capacity, p.state.remaining, p.state.reset], [100, 42, 58]);
  assert.equal(await p.load('tiles/places/9/2/1.mvt'), 'ok');
  assert.deepEqual([p.state.capacity, p.state.remaining, p.state.reset], [50, 7, 43]);
});

test('meter: a refusal shows a small cost as one', async () => {
  const costs = { 1: 0.02, 2: 0.004, 3: 0.15, 4: 41.66, 5: 2 };
  const p = await page({
    tile: (path) => {
      const cost = costs[path.split('/')[3]];
      // Retry-After over a minute: the page gives the tile up at once.
      return answer(429, { policy: POLICY, limit: '"anonymous";r=0;t=100', x: [100, 0, 100], cost, retryAfter: 120 },
        { type: IANA + 'quota-exceeded', cost, remaining: 0, retry_after: 120, 'violated-policies': ['anonymous'] });
    },
  });
  const notes = [];
  for (const x of Object.keys(costs)) {
    assert.equal(await p.load(`tiles/places/9/${x}/1.mvt`), 'ok');
    notes.push(p.text('last-refused').match(/\(cost ([^)]*)\)/)[1]);
  }
  assert.deepEqual(notes, ['0.02', '<0.01', '0.15', '41.7', '2']);
});

// ---------------------------------------------------------------- spent --

// Which answers charge what they are priced at (toll.Charge,
// toll/refusal.go): a request admitted is charged whatever its status;
// refusals (429, 422, the global budget's 503) and a shadow-mode answer the
// bucket could not pay are priced and charged nothing.

test('spent: tiles admitted are counted, a 422 and 429s and a shadow-mode answer are not', async () => {
  const p = await page({
    tile: (path) => {
      switch (path.split('/')[3]) {
        case '1': return admitted(90, 0.5);
        case '2': return answer(204, { policy: POLICY, limit: '"anonymous";r=89;t=11', cost: 0.25 });
        case '3': return answer(422, { policy: POLICY, limit: '"anonymous";r=89;t=11', cost: 900 },
          { type: 'urn:geotoll:problem:out-of-range', cost: 900, max_request_cost: 100 });
        case '4': return answer(429, { policy: POLICY, limit: '"anonymous";r=0;t=100', cost: 3, retryAfter: 120 },
          { type: IANA + 'quota-exceeded', cost: 3, remaining: 0, retry_after: 120, 'violated-policies': ['anonymous'] });
        case '5': return answer(429, { policy: POLICY, limit: '"anonymous-concurrency";r=0;t=1', cost: 0.7, retryAfter: 1 },
          { type: IANA + 'quota-exceeded', in_flight: 4, max_in_flight: 4, 'violated-policies': ['anonymous-concurrency'] });
        case '6': return admitted(0, 4, { shadow: true });
        default: return answer(404);
      }
    },
  });
  assert.equal(await p.load('tiles/places/9/1/1.mvt'), 'ok');
  assert.equal(await p.load('tiles/places/9/2/1.mvt'), 'ok');
  assert.equal(p.state.spent, 0.75);
  assert.equal(await p.load('tiles/places/9/3/1.mvt'), 'error 422');
  assert.equal(p.state.spent, 0.75, 'a 422 above the most a request may cost charges nothing');
  assert.equal(await p.load('tiles/places/9/6/1.mvt'), 'ok');
  assert.equal(p.state.spent, 0.75, 'X-RateLimit-Shadow: would-refuse: the bucket could not pay it, and was not charged');
  assert.equal(p.state.lastCost, 4);
  assert.equal(await p.load('tiles/places/9/4/1.mvt'), 'ok'); // given up: Retry-After over a minute
  // (last: after it, the page holds its tiles back for the Retry-After)
  assert.equal(await p.load('tiles/places/9/5/1.mvt', { abortAfter: true }), 'aborted');
  assert.equal(p.state.spent, 0.75, 'a 429 charges nothing');
  assert.equal(p.state.refused, 2);
  assert.equal(p.text('spent'), '0.8');
});

test('spent: a 503 of the global budget is not counted, a 503 of a request admitted is', async () => {
  const global = () => answer(503, { policy: POLICY, limit: '"anonymous";r=90;t=10', cost: 2, retryAfter: 0 },
    { type: IANA + 'temporary-reduced-capacity', detail: 'the database is at its budget for everyone; your own budget was not charged',
      cost: 2, retry_after: 0, 'violated-policies': ['global'] });
  const timeout = () => answer(503, { policy: POLICY, limit: '"anonymous";r=88;t=12', cost: 1.5, estimate: 1, retryAfter: 0 },
    { type: 'urn:geotoll:problem:timeout', detail: 'the tile was not ready within the request\'s time limit; try again later' });
  const p = await page({
    tile: (path, n) => {
      switch (path.split('/')[3]) {
        case '1': return global(); // refused, and refused again when asked again
        case '2': return n === 1 ? global() : admitted(88, 2); // refused, then admitted
        case '3': return timeout(); // admitted, failed twice
        default: return answer(404);
      }
    },
  });
  assert.equal(await p.load('tiles/places/9/1/1.mvt'), 'error 503');
  assert.equal(p.state.spent, 0, 'the global budget\'s refusals charge nothing');
  assert.equal(await p.load('tiles/places/9/2/1.mvt'), 'ok');
  assert.equal(p.state.spent, 2);
  assert.equal(await p.load('tiles/places/9/3/1.mvt'), 'error 503');
  assert.equal(p.state.spent, 5, 'a request admitted and then failed by the database is charged, each time');
  assert.equal(p.state.retries, 3);
});

test('spent: an unknown key\'s 401 is counted (a token of the failed-auth bucket)', async () => {
  const p = await page({
    tile: () => answer(401, { policy: '"failed-auth";q=10;qu="tokens";w=600', limit: '"failed-auth";r=9;t=60', x: [10, 9, 60], cost: 1 },
      { type: 'urn:geotoll:problem:unauthorized', detail: 'unknown or revoked API key' }),
  });
  assert.equal(await p.load('tiles/places/9/1/1.mvt'), 'error 401');
  assert.equal(p.state.spent, 1);
  assert.deepEqual([p.state.tier, p.state.capacity, p.state.remaining], ['failed-auth', 10, 9]);
});

// --------------------------------------------------------------- layers --

// Layer names are [A-Za-z0-9_-]{1,64} (tiles/layer.go), so
// Object.prototype's own names are names a layer may have.
const PROTO_NAMES = ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf'];

test('layers: names of Object.prototype\'s properties are layers like any other', async () => {
  const list = await page({ catalog: { layers: [{ name: 'roads' }, ...PROTO_NAMES.map((name) => ({ name, minzoom: 2, maxzoom: 16 })), { name: 'roads' }] } });
  assert.equal(list.state.catalog, 'server');
  assert.deepEqual(Array.from(list.state.layers, (l) => l.name), ['roads', ...PROTO_NAMES]);

  // {layers: {name: {...}}}, as JSON: "__proto__" is a key like the others.
  const byName = await page({ catalog: '{"layers": {"constructor": {"maxzoom": 14}, "__proto__": {"minzoom": 3}, "toString": {}}}' });
  assert.deepEqual(Array.from(byName.state.layers, (l) => [l.name, l.minzoom, l.maxzoom]),
    [['constructor', 0, 14], ['__proto__', 3, 22], ['toString', 0, 22]]);
});

test('layers: a layer named after an Object.prototype property has counts of its own', async () => {
  const p = await page({
    catalog: { layers: PROTO_NAMES.map((name) => ({ name })) },
    tile: (path) => (path.startsWith('tiles/toString/') ? answer(204, { policy: POLICY, limit: '"anonymous";r=90;t=10', cost: 0.1 }) : admitted(90, 0.2)),
  });
  for (const name of PROTO_NAMES) {
    assert.equal(await p.load(`tiles/${name}/3/1/2.mvt`), 'ok');
    assert.equal(await p.load(`tiles/${name}/3/1/3.mvt`), 'ok');
    p.emit('sourcedata', { sourceId: 'gt-' + name, tile: { state: 'loaded', tileID: { canonical: { z: 3 } } } });
  }
  for (const name of PROTO_NAMES) {
    const s = p.state.perLayer[name];
    assert.deepEqual({ ...s }, { requests: 2, loaded: 2, empty: name === 'toString' ? 2 : 0, refused: 0 }, name);
    assert.equal(p.count(name), '2', name);
    assert.equal(p.state.drawn[name + '/3'], 1, name);
  }
  assert.equal(p.state.loaded, 2 * PROTO_NAMES.length);
  assert.equal(p.run('Object.prototype.requests === undefined && Object.requests === undefined'), true, 'nothing written on Object');
});
