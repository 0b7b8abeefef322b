// Real-browser test of geotoll's preview page (web/): Debian's Chromium,
// headless, driven by playwright-core, against a running geotoll.
//
//   GEOTOLL_PREVIEW_URL  base URL of the server (required), e.g. http://127.0.0.1:8080
//   GEOTOLL_CHROMIUM     the browser (default /usr/bin/chromium)
//   GEOTOLL_ARTIFACTS    where screenshots go (default <repo>/artifacts)
//   GEOTOLL_PREVIEW_KEY  an API key with room for low-zoom tiles (optional:
//                        without it the z2/z5 test runs anonymously, and
//                        waits out the 429s)
//
// cmd/geotoll's TestBrowserPreview starts a server and runs this file with
// `node --test`; `make test` runs that. By hand:
//
//   make run &   # or any geotoll
//   GEOTOLL_PREVIEW_URL=http://127.0.0.1:8080 node --test web/browser/preview.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const base = (process.env.GEOTOLL_PREVIEW_URL || '').replace(/\/+$/, '');
const executablePath = process.env.GEOTOLL_CHROMIUM || '/usr/bin/chromium';
const artifacts = process.env.GEOTOLL_ARTIFACTS || path.resolve(here, '../../artifacts');
const previewKey = process.env.GEOTOLL_PREVIEW_KEY || '';

if (!base) {
  throw new Error('GEOTOLL_PREVIEW_URL is not set: the base URL of a running geotoll');
}
const origin = new URL(base).origin;
const host = new URL(base).hostname;

// Chromium flags: no sandbox (root in CI), software WebGL (no GPU here),
// and nothing that talks to the network on its own. The host resolver
// rule makes every name but the server's (and loopback) unresolvable, so
// even a request Chromium makes on its own cannot leave the machine.
const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--use-angle=swiftshader',
  '--enable-unsafe-swiftshader',
  '--disable-quic',
  '--no-first-run',
  '--no-default-browser-check',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-default-apps',
  '--disable-domain-reliability',
  '--disable-client-side-phishing-detection',
  '--disable-breakpad',
  '--metrics-recording-only',
  '--no-pings',
  '--dns-prefetch-disable',
  '--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication,CertificateTransparencyComponentUpdater',
  '--no-proxy-server',
  `--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1], EXCLUDE ${host}`,
];

let browser;
let userDataDir;
let context;
let page;
const problems = []; // console errors, page errors, failed responses, requests off the server
const busyTiles = new Map(); // tile path -> 503s with a Retry-After the page saw

before(async () => {
  await mkdir(artifacts, { recursive: true });
  userDataDir = await mkdtemp(path.join(tmpdir(), 'geotoll-chromium-'));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 800 },
    timeout: 60_000, // a loaded 2-core CI machine starts Chromium slowly
  });
  browser = context.browser();
  page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(30_000);
  page.on('console', (msg) => {
    // Chromium logs every non-2xx response as "Failed to load resource";
    // those are judged by the response handler below instead.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) {
      problems.push(`console: ${msg.text()}`);
    }
  });
  page.on('response', (r) => {
    const u = new URL(r.url());
    if (r.status() < 400) return;
    if (r.status() === 429 && u.pathname.startsWith('/tiles/')) return; // the page shows these
    if (r.status() === 404 && (u.pathname === '/tiles' || u.pathname === '/budget')) return; // optional routes
    if (r.status() === 503 && u.pathname.startsWith('/tiles/') && r.headers()['retry-after']) {
      // The database busy (a loaded machine): the page asks again once,
      // after Retry-After; a tile answered 503 twice is an error.
      const n = (busyTiles.get(u.pathname) || 0) + 1;
      busyTiles.set(u.pathname, n);
      if (n < 2) return;
    }
    problems.push(`HTTP ${r.status()} for ${u.pathname}`);
  });
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('request', (req) => {
    const u = new URL(req.url());
    if (!['data:', 'blob:'].includes(u.protocol) && u.origin !== origin) {
      problems.push(`request off the server: ${req.url()}`);
    }
  });
}, { timeout: 75_000 });

after(async () => {
  await context?.close().catch(() => {});
  await browser?.close().catch(() => {});
  if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
}, { timeout: 15_000 });

// waitFor is page.waitForFunction that, on a timeout, says what it waited
// for and what the page's state was.
async function waitFor(what, fn, arg, options) {
  try {
    await page.waitForFunction(fn, arg, options);
  } catch (err) {
    const s = await page.evaluate(() => {
      const st = window.geotollState;
      if (!st) return 'no window.geotollState';
      const { layers, refusedTiles, ...rest } = st;
      return JSON.stringify({ ...rest, refusedTiles: refusedTiles.length, mapLoaded: window.geotollMap?.loaded() });
    }).catch((e) => `(state unavailable: ${e.message})`);
    throw new Error(`waiting for ${what}: ${err.message.split('\n')[0]}\nstate: ${s}`);
  }
}

// featureCounts counts the rendered features per source layer.
async function featureCounts() {
  return page.evaluate(() => {
    const counts = {};
    for (const f of window.geotollMap.queryRenderedFeatures()) {
      const name = f.sourceLayer || f.source;
      counts[name] = (counts[name] || 0) + 1;
    }
    return counts;
  });
}

// Time bounds: 15 s (launch) + 30 + 28 + 12 + 5 (close), under this test's 90 s.
test('the preview page draws every layer and shows the budget', { timeout: 90_000 }, async () => {
  const resp = await page.goto(base + '/', { waitUntil: 'load' });
  assert.equal(resp.status(), 200);
  assert.match(resp.headers()['content-type'], /^text\/html/);
  assert.ok(resp.headers()['etag'], 'the page has an ETag');

  // WebGL must work (SwiftShader), or nothing can render.
  const webgl = await page.evaluate(() => {
    const gl = document.createElement('canvas').getContext('webgl2') || document.createElement('canvas').getContext('webgl');
    return gl ? gl.getParameter(gl.VERSION) : null;
  });
  assert.ok(webgl, 'Chromium has WebGL');

  // Loaded, idle, every tile in view done, and something priced.
  await waitFor(
    'the map to load its tiles and go idle',
    () => {
      const m = window.geotollMap;
      const s = window.geotollState;
      return m && s && s.ready && s.idleCount > 0 && m.loaded() && m.areTilesLoaded() && s.priced > 0;
    },
    null,
    { timeout: 60_000, polling: 200 },
  );

  const state = await page.evaluate(() => structuredClone(window.geotollState));
  const names = state.layers.map((l) => l.name);
  for (const want of ['places', 'districts', 'geofences']) {
    assert.ok(names.includes(want), `layer ${want} in ${JSON.stringify(names)} (from ${state.catalog})`);
  }

  const counts = await featureCounts();
  console.log('rendered features per layer:', JSON.stringify(counts));
  assert.ok(counts.places > 0, `places features rendered: ${JSON.stringify(counts)}`);
  assert.ok(counts.districts > 0, `districts features rendered: ${JSON.stringify(counts)}`);

  // The budget came from the tiles' headers.
  console.log('budget:', JSON.stringify({
    tier: state.tier, capacity: state.capacity, remaining: state.remaining, rate: state.rate,
    lastCost: state.lastCost, requests: state.requests, spent: state.spent, refused: state.refused,
  }));
  assert.equal(typeof state.capacity, 'number');
  assert.ok(state.capacity > 0, 'capacity > 0');
  assert.equal(typeof state.remaining, 'number');
  assert.ok(state.remaining >= 0 && state.remaining <= state.capacity, 'remaining within [0, capacity]');
  assert.equal(typeof state.lastCost, 'number');
  assert.ok(state.lastCost > 0, 'a tile cost something');
  assert.equal(typeof state.tier, 'string');
  assert.ok(state.priced > 0 && state.priced <= state.requests);

  // And the panel shows them.
  const meter = await page.evaluate(() => ({
    remaining: document.getElementById('remaining').textContent,
    capacity: document.getElementById('capacity').textContent,
    tier: document.getElementById('tier').textContent,
    width: document.getElementById('meter-bar').style.width,
  }));
  assert.match(meter.remaining, /^\d[\d,]*$/);
  assert.equal(meter.capacity, String(state.capacity));
  assert.equal(meter.tier, state.tier);
  assert.match(meter.width, /^\d+(\.\d+)?%$/);

  await page.screenshot({ path: path.join(artifacts, 'preview.png') });
  assert.deepEqual(problems, []);
});

test('refused tiles (429) are counted and outlined', { timeout: 90_000 }, async () => {
  // Only places, through the panel's toggles: hidden layers are not fetched.
  for (const name of ['districts', 'geofences']) {
    await page.uncheck(`#layers input[data-layer="${name}"]`);
  }
  const before = await page.evaluate(() => structuredClone(window.geotollState.perLayer));
  // Western Europe at z5: a places tile there costs about 40 tokens, so the
  // anonymous budget (80) pays for one or two of the view's six and refuses
  // the rest until it refills; they wait in the queue, outlined in red.
  await page.evaluate(() => window.geotollMap.jumpTo({ center: [6, 50.5], zoom: 5 }));
  await waitFor(
    'a z5 places tile drawn while others are refused and outlined',
    () => {
      const s = window.geotollState;
      return s.refused > 0 && s.refusedTiles.length > 0 && s.drawn['places/5'] > 0;
    },
    null,
    { timeout: 45_000, polling: 100 },
  );
  const after = await page.evaluate(() => structuredClone(window.geotollState.perLayer));
  assert.equal(after.districts.requests, before.districts.requests, 'hidden districts were not fetched');
  assert.equal(after.geofences.requests, before.geofences.requests, 'hidden geofences were not fetched');
  const z5 = await page.evaluate(() => window.geotollMap.queryRenderedFeatures({ layers: ['gt-places-circle'] }).length);
  assert.ok(z5 > 0, 'places drawn at z5');
  // For the screenshot: the queue admits the next tile once its Retry-After
  // is over (a few seconds); show two drawn tiles if it comes in time.
  await page.waitForFunction(() => window.geotollState.drawn['places/5'] > 1 && window.geotollState.refusedTiles.length > 0, null, { timeout: 7_000, polling: 100 }).catch(() => {});
  // Let the outline layer draw, then check it did.
  await waitFor(
    'the refused-tile outline to render',
    () => window.geotollMap.queryRenderedFeatures({ layers: ['refused-line'] }).length > 0,
    null,
    { timeout: 3_000, polling: 100 },
  );
  const s = await page.evaluate(() => ({
    refused: window.geotollState.refused,
    outlined: window.geotollState.refusedTiles.length,
    text: document.getElementById('refused').textContent,
    note: document.getElementById('last-refused').textContent,
  }));
  console.log('refused:', JSON.stringify(s));
  // The panel redraws on the next frame, so it may trail the state by a
  // response or two.
  assert.ok(Number(s.text) > 0 && Number(s.text) <= s.refused, `refused count shown: ${s.text}`);
  assert.match(s.note, /^Refused /);
  await page.screenshot({ path: path.join(artifacts, 'preview-429.png') });
  assert.deepEqual(problems, []);
});

// The layer list comes from GET /tiles when the server has a catalog there
// (its shape is tolerated loosely); here a TileJSON-like answer is stubbed.
test('a catalog at /tiles sets the layers', { timeout: 40_000 }, async () => {
  const stub = await context.newPage();
  try {
    await stub.route(base + '/tiles', (route) => route.fulfill({
      status: 200,
      contentType: 'application/json',
      body: JSON.stringify({ tilejson: '3.0.0', vector_layers: [{ id: 'places', minzoom: 3, maxzoom: 14 }, { id: 'geofences' }] }),
    }));
    await stub.goto(base + '/#11/52.52/13.405', { waitUntil: 'load' });
    await stub.waitForFunction(() => window.geotollState && window.geotollState.ready, null, { timeout: 25_000 });
    const s = await stub.evaluate(() => ({
      catalog: window.geotollState.catalog,
      layers: window.geotollState.layers.map(({ name, minzoom, maxzoom }) => ({ name, minzoom, maxzoom })),
      toggles: [...document.querySelectorAll('#layers input')].map((i) => i.dataset.layer),
      source: window.geotollMap.getSource('gt-places').minzoom,
    }));
    assert.equal(s.catalog, 'server');
    assert.deepEqual(s.layers, [{ name: 'places', minzoom: 3, maxzoom: 14 }, { name: 'geofences', minzoom: 0, maxzoom: 22 }]);
    assert.deepEqual(s.toggles, ['places', 'geofences']);
    assert.equal(s.source, 3);
  } finally {
    await stub.close();
  }
  assert.deepEqual(problems, []);
});

// A 503 with a Retry-After (the server's database busy) is asked again
// once, after that wait: here the first places tile asked for answers 503
// once and loads when asked again; the second answers 503 every time and
// counts as the page's one error. Every other tile comes from the server.
test('a tile answered 503 with a Retry-After is asked again once', { timeout: 60_000 }, async () => {
  const p = await context.newPage();
  const asked = new Map(); // tile path -> requests that reached the route
  const refused = new Map(); // tile path -> answers 429 (run without a key, a budget may run dry)
  const errors = [];
  p.on('pageerror', (err) => errors.push(`page error: ${err.message}`));
  p.on('response', (r) => {
    if (r.status() === 429) {
      const tile = new URL(r.url()).pathname;
      refused.set(tile, (refused.get(tile) || 0) + 1);
    }
  });
  let once = null;
  let always = null;
  try {
    await p.route((u) => /^\/tiles\/places\/\d+\/\d+\/\d+\.mvt$/.test(u.pathname), async (route) => {
      const tile = new URL(route.request().url()).pathname;
      const n = (asked.get(tile) || 0) + 1;
      asked.set(tile, n);
      // Only tiles of the view's zoom: MapLibre may also ask for a tile of
      // another zoom while it settles, and abort it once the view's tiles
      // load — an aborted tile is never asked again, and the wait below
      // would wait for its second 503 for ever.
      if (tile.startsWith('/tiles/places/11/')) {
        if (once === null) once = tile;
        else if (always === null && tile !== once) always = tile;
      }
      if ((tile === once && n === 1) || tile === always) {
        // The last answer comes after the view's other tiles have loaded
        // and drawn: a map that renders nothing more after a tile's error
        // would never tell it is done ('load' and 'idle').
        if (tile === always && n > 1) await new Promise((r) => setTimeout(r, 2_000));
        return route.fulfill({
          status: 503,
          headers: { 'Retry-After': '1', 'Content-Type': 'application/problem+json' },
          body: JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'the database is busy' }),
        });
      }
      return route.continue();
    });
    const query = previewKey ? '?key=' + encodeURIComponent(previewKey) : '';
    await p.goto(`${base}/${query}#11/52.52/13.405`, { waitUntil: 'load' });
    try {
      await p.waitForFunction(
        () => {
          const m = window.geotollMap;
          const s = window.geotollState;
          return m && s && s.ready && s.idleCount > 0 && m.loaded() && m.areTilesLoaded() && s.waiting === 0 && s.errors > 0;
        },
        null,
        { timeout: 45_000, polling: 200 },
      );
    } catch (err) {
      // What the page was waiting for, for the failure's log.
      const st = await p.evaluate(() => {
        const m = window.geotollMap;
        const s = window.geotollState || {};
        return {
          ready: s.ready, idleCount: s.idleCount, waiting: s.waiting, errors: s.errors, retries: s.retries,
          refused: s.refused, gaveUp: s.gaveUp, loaded: m && m.loaded(), tilesLoaded: m && m.areTilesLoaded(),
        };
      }).catch((e) => ({ evaluate: String(e) }));
      console.log('503s, timed out:', JSON.stringify({ once, always, asked: Object.fromEntries(asked), refused: Object.fromEntries(refused), page: st, errors }));
      throw err;
    }
    const s = await p.evaluate(() => ({ errors: window.geotollState.errors, retries: window.geotollState.retries }));
    console.log('503s:', JSON.stringify({ once, always, asked: Object.fromEntries(asked), ...s }));
    assert.ok(once && always, `two places tiles asked for: ${JSON.stringify(Object.fromEntries(asked))}`);
    // Not counted: asks the budget refused (429), retried after their wait.
    const tries = (tile) => asked.get(tile) - (refused.get(tile) || 0);
    assert.equal(tries(once), 2, 'the tile that answered 503 once was asked again, once');
    assert.equal(tries(always), 2, 'the tile that answered 503 every time was asked twice, no more');
    assert.deepEqual(errors, []);
    assert.equal(s.errors, 1, 'only the tile that answered 503 twice is an error');
    assert.ok(s.retries >= 2, `both 503s were asked again: ${s.retries} retries`);
  } finally {
    await p.close();
  }
});

// The demo at z2 and z5, the zooms its overviews serve: every tile loads,
// points are drawn as clusters carrying point_count (the server merges the
// points of one pixel cell), and the screenshots go to artifacts/.
test('low zooms draw the demo from its overviews', { timeout: 120_000 }, async () => {
  const low = await context.newPage();
  try {
    const query = previewKey ? '?key=' + encodeURIComponent(previewKey) : '';
    for (const view of [{ zoom: 2, lat: 30, lon: 20, want: ['places', 'geofences'] },
                        { zoom: 5, lat: 50.5, lon: 6, want: ['places', 'districts', 'geofences'] }]) {
      await low.goto(`${base}/${query}#${view.zoom}/${view.lat}/${view.lon}`, { waitUntil: 'load' });
      await low.waitForFunction(
        () => {
          const m = window.geotollMap;
          const s = window.geotollState;
          return m && s && s.ready && s.idleCount > 0 && m.loaded() && m.areTilesLoaded() && s.waiting === 0;
        },
        null,
        { timeout: 50_000, polling: 200 },
      );
      const drawn = await low.evaluate(() => {
        const counts = {};
        let clusters = 0;
        for (const f of window.geotollMap.queryRenderedFeatures()) {
          counts[f.sourceLayer] = (counts[f.sourceLayer] || 0) + 1;
          if ((f.properties.point_count || 0) > 1) clusters++;
        }
        return { counts, clusters, zoom: window.geotollMap.getZoom() };
      });
      console.log(`z${view.zoom}: rendered features per layer ${JSON.stringify(drawn.counts)}, ${drawn.clusters} clusters`);
      assert.equal(Math.round(drawn.zoom), view.zoom);
      for (const name of view.want) {
        assert.ok(drawn.counts[name] > 0, `z${view.zoom}: ${name} drawn: ${JSON.stringify(drawn.counts)}`);
      }
      assert.ok(drawn.clusters > 0, `z${view.zoom}: clusters with point_count > 1 drawn`);
      await low.screenshot({ path: path.join(artifacts, `preview-z${view.zoom}.png`) });
    }
  } finally {
    await low.close();
  }
  assert.deepEqual(problems, []);
});

// A key given as ?key= leaves the address bar before the map starts, and
// stays out of it as the view moves (MapLibre's hash rewrites the address
// on every move): the history, bookmarks and shared links get the view
// without the key. The page keeps the key in memory: its tiles carry it.
test('the key leaves the address bar', { timeout: 40_000, skip: previewKey ? false : 'GEOTOLL_PREVIEW_KEY is not set' }, async () => {
  const p = await context.newPage();
  const tiles = []; // whether each tile request carried the key
  p.on('request', (req) => {
    if (new URL(req.url()).pathname.includes('/tiles/')) tiles.push(req.headers()['x-api-key'] === previewKey);
  });
  try {
    await p.goto(`${base}/?key=${encodeURIComponent(previewKey)}#11/52.52/13.405`, { waitUntil: 'load' });
    await p.waitForFunction(() => window.geotollState && window.geotollState.ready && window.geotollState.idleCount > 0, null, { timeout: 25_000 });
    const first = await p.evaluate(() => window.location.href);
    await p.evaluate(() => window.geotollMap.jumpTo({ center: [13.45, 52.5], zoom: 12 }));
    await p.waitForFunction(() => window.location.hash.startsWith('#12/'), null, { timeout: 5_000 });
    const moved = await p.evaluate(() => window.location.href);
    for (const href of [first, moved]) {
      const u = new URL(href);
      assert.ok(!href.includes(previewKey), `the key is in the address: ${href}`);
      assert.equal(u.search, '', `the address keeps a query: ${href}`);
      assert.equal(u.pathname, new URL(base + '/').pathname);
    }
    assert.ok(new URL(first).hash.startsWith('#11/'), `the view is kept: ${first}`);
    assert.ok(tiles.length > 0 && tiles.every(Boolean), `every tile request carries the key: ${tiles.length} asked`);
  } finally {
    await p.close();
  }
});
