// geotoll preview page.
//
// Draws every tile layer geotoll serves with MapLibre GL JS (vendored, no
// CDN, no glyphs or sprites: only background, fill, line and circle layers)
// and shows the caller's token bucket live.
//
// Tiles are loaded through a custom protocol, geotoll://tiles/..., so that
// this script makes the fetch itself and can read each response's budget
// headers (RateLimit-Policy, RateLimit, X-RateLimit-*, X-Request-Cost) —
// MapLibre's own loader does not expose them. A refused tile (429) is
// counted, flashes the meter, and is outlined in red on the map until a
// retry after Retry-After loads it.
//
// For tests and the console: window.geotollMap is the map,
// window.geotollState the budget and request counters.
//
// URL options: ?key=K sends `X-API-Key: K` with every tile request (the
// keyed tier); the hash (#zoom/lat/lon) holds the view. The key is read
// once and the query dropped from the address bar before the map starts
// (MapLibre's hash rewrites the URL on every move, query and all): the key
// stays in this page's memory only, out of the history, bookmarks and
// shared links; a reload runs anonymously.
(function () {
  'use strict';

  // The layers of the demo configuration, used when the server has no
  // catalog at /tiles (or its answer cannot be read).
  var FALLBACK_LAYERS = [
    { name: 'places', minzoom: 0, maxzoom: 22 },
    { name: 'districts', minzoom: 4, maxzoom: 22 },
    { name: 'geofences', minzoom: 0, maxzoom: 22 },
  ];
  var PALETTE = ['#e8590c', '#1c7ed6', '#2f9e44', '#ae3ec9', '#f08c00', '#0c8599', '#c2255c', '#5c940d'];
  var LAYER_NAME = /^[A-Za-z0-9_-]{1,64}$/;
  // The path the server is served under (base_path), from the page.
  var BASE = (document.querySelector('meta[name="geotoll-base"]') || { content: '' }).content;
  var INITIAL = { center: [13.405, 52.52], zoom: 11 }; // Berlin
  var MAX_SOURCE_ZOOM = 16; // deeper zooms overzoom z16 tiles instead of buying new ones
  // A refused tile is retried after its Retry-After for as long as MapLibre
  // wants it (it aborts tiles that leave the view). Only a Retry-After longer
  // than this gives up, and then the tile is left empty, outlined for good:
  // an errored tile would make MapLibre fetch its parent as a stand-in, and
  // a parent tile costs more than its children.
  var MAX_RETRY_WAIT = 60; // seconds
  var CATALOG_TIMEOUT_MS = 3000;
  var REFUSED_SOURCE = 'geotoll-refused';

  var params = new URLSearchParams(window.location.search);
  var apiKey = params.get('key') || '';
  if (window.location.search) {
    window.history.replaceState(null, '', window.location.pathname + window.location.hash);
  }

  var state = {
    // Page lifecycle.
    ready: false, // the style and every source are added
    idleCount: 0, // 'idle' events seen
    catalog: null, // 'server' or 'fallback'
    layers: [], // [{name, minzoom, maxzoom, color}]
    // The budget, from the last tile response that carried budget headers.
    tier: null,
    capacity: null, // tokens (RateLimit-Policy q, or X-RateLimit-Limit)
    window: null, // seconds to refill from empty (RateLimit-Policy w)
    rate: null, // tokens per second: capacity / window
    remaining: null, // tokens, as the server reported them
    reset: null, // seconds until full, as reported
    observedAt: null, // Date.now() when remaining was reported
    estimate: null, // remaining plus the refill since observedAt (what the meter shows)
    lastCost: null, // X-Request-Cost of the last priced response
    lastStatus: null,
    lastTile: null,
    // Counters over the page's life.
    requests: 0, // tile responses received
    priced: 0, // of which carried budget headers
    loaded: 0, // of which were tiles handed to the map (200 or 204)
    // Keyed by layer name, so without a prototype: a layer may be called
    // constructor, toString or __proto__.
    drawn: Object.create(null), // "layer/z" -> tiles MapLibre has parsed and can draw
    spent: 0, // tokens charged (sum of X-Request-Cost of the responses charged: see charged)
    refused: 0, // 429 responses
    errors: 0, // other failures (not aborts)
    retries: 0,
    perLayer: Object.create(null), // name -> {requests, loaded (200 or 204), empty (204), refused (429)}
    refusedTiles: [], // [{layer, z, x, y, retryAfter, attempts, final}] now outlined
    gaveUp: 0, // refused tiles left empty (Retry-After over MAX_RETRY_WAIT)
    waiting: 0, // tiles queued behind a Retry-After
    lastRefusal: null, // {layer, z, x, y, retryAfter, detail}
  };
  window.geotollState = state;

  var exactRate = null; // {capacity, rate} from /budget
  var refusedTiles = new Map(); // "layer/z/x/y" -> entry in state.refusedTiles

  var $ = function (id) { return document.getElementById(id); };

  // ------------------------------------------------------------ headers --

  // splitTop splits s at each sep outside a quoted string.
  function splitTop(s, sep) {
    var out = [];
    var cur = '';
    var quoted = false;
    for (var i = 0; i < s.length; i++) {
      var c = s.charAt(i);
      if (quoted && c === '\\' && i + 1 < s.length) {
        cur += c + s.charAt(++i);
        continue;
      }
      if (c === '"') quoted = !quoted;
      if (c === sep && !quoted) {
        out.push(cur);
        cur = '';
        continue;
      }
      cur += c;
    }
    out.push(cur);
    return out;
  }

  function unquote(v) {
    v = v.trim();
    return /^"[\s\S]*"$/.test(v) ? v.slice(1, -1).replace(/\\([\s\S])/g, '$1') : v;
  }

  // parseList reads a structured-field list such as
  // `"keyed";q=100;w=5, "keyed-concurrency";q=4` into its members,
  // [{name, params}], in order.
  function parseList(value) {
    if (!value) return [];
    var out = [];
    splitTop(value, ',').forEach(function (member) {
      var parts = splitTop(member, ';');
      var name = unquote(parts[0]);
      if (!name) return;
      var params = Object.create(null);
      for (var i = 1; i < parts.length; i++) {
        var eq = parts[i].indexOf('=');
        if (eq < 0) continue;
        params[parts[i].slice(0, eq).trim()] = unquote(parts[i].slice(eq + 1));
      }
      out.push({ name: name, params: params });
    });
    return out;
  }

  function num(v) {
    if (v === null || v === undefined || v === '') return null;
    var n = Number(v);
    return Number.isFinite(n) ? n : null;
  }

  // budgetFrom reads the budget headers of one response: the draft
  // RateLimit fields, or X-RateLimit-* from a server that sends only those.
  //
  // The first member of RateLimit-Policy is the caller's own bucket (its
  // tier's); the others are policies that can refuse it too (its in-flight
  // cap "<tier>-concurrency", its IPv6 network's bucket, the global
  // budget). RateLimit names the policy it describes, and on a refusal by
  // one of the others it is that policy's (`"<tier>-concurrency";r=0;t=1`,
  // or the network's bucket) — as are the X-RateLimit-* then. So remaining
  // and reset are read only from the RateLimit member that names the
  // caller's bucket; a response without one leaves them null, and the
  // meter keeps what it had.
  function budgetFrom(headers) {
    var policies = parseList(headers.get('RateLimit-Policy'));
    var limits = parseList(headers.get('RateLimit'));
    var cost = num(headers.get('X-Request-Cost'));
    if (!policies.length && !limits.length) {
      return {
        tier: null,
        capacity: num(headers.get('X-RateLimit-Limit')),
        window: null,
        remaining: num(headers.get('X-RateLimit-Remaining')),
        reset: num(headers.get('X-RateLimit-Reset')),
        cost: cost,
      };
    }
    var own = policies.length ? policies[0] : null;
    var name = own ? own.name : limits[0].name;
    var limit = null;
    for (var i = 0; i < limits.length && !limit; i++) {
      if (limits[i].name === name) limit = limits[i];
    }
    return {
      tier: name,
      capacity: own ? num(own.params.q) : num(headers.get('X-RateLimit-Limit')),
      window: own ? num(own.params.w) : null,
      remaining: num(limit && limit.params.r),
      reset: num(limit && limit.params.t),
      cost: cost,
    };
  }

  // The problem type of a refusal by the global database budget (a 503):
  // IANA's temporary-reduced-capacity.
  var REDUCED_CAPACITY = /#temporary-reduced-capacity$/;

  // charged reports whether the server charged the X-Request-Cost of a
  // response (toll.Charge and toll/refusal.go): a request it admitted is
  // charged whatever its answer — a tile (200, 204, 304), and as much a
  // 503 or 500 when the database failed it, settled at the database time
  // it had taken — and a 401 for an unknown key is charged to the
  // failed-auth bucket its headers describe. Priced but not charged: a
  // refusal (429: the caller's bucket, its network's or its in-flight
  // cap), a price above the most the tier allows (422), a refusal by the
  // global database budget (503 of type temporary-reduced-capacity: "your
  // own budget was not charged") and an answer in shadow mode the bucket
  // could not pay (X-RateLimit-Shadow: would-refuse).
  function charged(resp, problem) {
    if (resp.status === 429 || resp.status === 422) return false;
    if (resp.status === 503 && problem && REDUCED_CAPACITY.test(String(problem.type))) return false;
    if (resp.headers.get('X-RateLimit-Shadow')) return false;
    return true;
  }

  function retryAfter(headers) {
    var s = num(headers.get('Retry-After'));
    return s === null ? 1 : Math.max(0, s);
  }

  // ------------------------------------------------------------- budget --

  function layerStats(name) {
    if (!state.perLayer[name]) state.perLayer[name] = { requests: 0, loaded: 0, empty: 0, refused: 0 };
    return state.perLayer[name];
  }

  // observe records one tile response's budget headers in the state and
  // the meter, and returns them (spend adds what it was charged).
  function observe(resp, tile) {
    state.requests++;
    state.lastStatus = resp.status;
    state.lastTile = tile.key;
    layerStats(tile.layer).requests++;
    var b = budgetFrom(resp.headers);
    if (b.remaining === null && b.capacity === null && b.cost === null) {
      render();
      return b; // not priced (bad input, or a server without a toll)
    }
    state.priced++;
    if (b.tier !== null) state.tier = b.tier;
    if (b.capacity !== null) state.capacity = b.capacity;
    if (b.window !== null) state.window = b.window;
    // w is whole seconds: capacity / w only approximates the rate, so an
    // exact rate from /budget (for the same capacity) is kept.
    if (state.capacity !== null && state.window && !(exactRate && exactRate.capacity === state.capacity)) {
      state.rate = state.capacity / state.window;
    }
    if (b.remaining !== null) {
      state.remaining = b.remaining;
      state.observedAt = Date.now();
    }
    if (b.reset !== null) state.reset = b.reset;
    if (b.cost !== null) state.lastCost = b.cost;
    render();
    return b;
  }

  // spend counts the cost of a response the server charged; problem is
  // its problem document, if any.
  function spend(resp, b, problem) {
    if (b.cost === null || !charged(resp, problem)) return;
    state.spent = Math.round((state.spent + b.cost) * 1000) / 1000;
    render();
  }

  // seedBudget fills the meter from GET /budget (the caller's budget, never
  // charged) before the first tile arrives. Optional: a server without the
  // route, or any failure, leaves the meter to the tile responses.
  async function seedBudget() {
    var ctl = new AbortController();
    var timer = window.setTimeout(function () { ctl.abort(); }, CATALOG_TIMEOUT_MS);
    try {
      var headers = { Accept: 'application/json' };
      if (apiKey) headers['X-API-Key'] = apiKey;
      var resp = await fetch(BASE + '/budget', { headers: headers, signal: ctl.signal, cache: 'no-store', credentials: 'omit' });
      if (!resp.ok || !/json/.test(resp.headers.get('Content-Type') || '')) return;
      var b = await resp.json();
      if (state.priced > 0 || !b || typeof b !== 'object') return; // a tile was faster
      var cap = num(b.capacity);
      var rem = num(b.remaining);
      if (cap === null || rem === null) return;
      state.tier = typeof b.tier === 'string' ? b.tier : state.tier;
      state.capacity = cap;
      state.remaining = rem;
      state.observedAt = Date.now();
      var rate = num(b.rate);
      if (rate) {
        exactRate = { capacity: cap, rate: rate };
        state.rate = rate;
        state.window = Math.ceil(cap / rate);
      }
      state.reset = num(b.reset_after);
      render();
    } catch (e) {
      // No /budget: the first tile fills the meter.
    } finally {
      window.clearTimeout(timer);
    }
  }

  // estimate is the remaining budget now: the last report plus the refill
  // since, capped at the capacity.
  function estimate() {
    if (state.remaining === null) return null;
    var e = state.remaining;
    if (state.rate && state.observedAt !== null) {
      e += state.rate * (Date.now() - state.observedAt) / 1000;
    }
    if (state.capacity !== null) e = Math.min(e, state.capacity);
    return e;
  }

  function fmt(n, digits) {
    if (n === null || n === undefined) return '–';
    var d = digits === undefined ? 2 : digits;
    return Number(n.toFixed(d)).toLocaleString('en-US', { maximumFractionDigits: d });
  }

  // fmtCost shows a price: to a tenth from 1 token, two significant digits
  // below (0.02, 0.15), "<0.01" below that.
  function fmtCost(n) {
    if (n === null || n === undefined) return '–';
    if (n > 0 && n < 0.01) return '<0.01';
    if (n < 1) return String(Number(n.toPrecision(2)));
    return fmt(n, 1);
  }

  var renderQueued = false;
  function render() {
    if (renderQueued) return;
    renderQueued = true;
    window.requestAnimationFrame(function () {
      renderQueued = false;
      draw();
    });
  }

  function draw() {
    state.estimate = estimate();
    state.waiting = waiting.length;
    var cap = state.capacity;
    var est = state.estimate;
    $('tier').textContent = state.tier || '–';
    $('remaining').textContent = est === null ? '–' : fmt(Math.floor(est), 0);
    $('capacity').textContent = fmt(cap, 0);
    var frac = cap && est !== null ? Math.max(0, Math.min(1, est / cap)) : 0;
    var bar = $('meter-bar');
    bar.style.width = (frac * 100).toFixed(1) + '%';
    bar.classList.toggle('low', frac < 0.5 && frac >= 0.2);
    bar.classList.toggle('empty', frac < 0.2);
    var meter = bar.parentElement;
    meter.setAttribute('aria-valuemax', String(cap || 0));
    meter.setAttribute('aria-valuenow', String(est === null ? 0 : Math.floor(est)));
    $('last-cost').textContent = state.lastCost === null ? '–' : fmt(state.lastCost, 3);
    var full = null;
    if (est !== null && cap !== null && state.rate) full = Math.max(0, (cap - est) / state.rate);
    else if (state.reset !== null) full = state.reset;
    $('reset').textContent = full === null ? '–' : fmt(Math.ceil(full), 0) + ' s';
    $('rate').textContent = state.rate ? fmt(state.rate, 1) + ' /s' : '–';
    $('requests').textContent = fmt(state.requests, 0);
    $('spent').textContent = fmt(state.spent, 1);
    var refused = $('refused');
    refused.textContent = fmt(state.refused, 0);
    refused.classList.toggle('nonzero', state.refused > 0);
    var r = state.lastRefusal;
    var note = $('last-refused');
    note.hidden = !r;
    if (r) {
      note.textContent = 'Refused ' + r.layer + ' ' + r.z + '/' + r.x + '/' + r.y +
        ' (cost ' + fmtCost(r.cost) + '): retry after ' + r.retryAfter + ' s' +
        (refusedTiles.size ? ' · ' + refusedTiles.size + ' tile(s) outlined' : '') +
        (waiting.length ? ' · ' + waiting.length + ' waiting' : '');
    }
    for (var i = 0; i < state.layers.length; i++) {
      var l = state.layers[i];
      var s = layerStats(l.name);
      var el = document.querySelector('[data-count="' + l.name + '"]');
      if (el) {
        el.textContent = String(s.requests);
        if (s.refused) {
          var red = document.createElement('span');
          red.className = 'refused-count';
          red.textContent = ' · ' + s.refused + ' refused';
          el.append(red);
        }
      }
    }
  }

  // The meter refills between responses.
  window.setInterval(function () {
    if (state.remaining !== null && state.capacity !== null && state.estimate < state.capacity) render();
  }, 250);

  function flash() {
    var el = $('budget');
    el.classList.remove('flash');
    void el.offsetWidth; // restart the animation
    el.classList.add('flash');
  }

  // ------------------------------------------------------- refused tiles --

  function tileBounds(z, x, y) {
    var n = Math.pow(2, z);
    var lon = function (xx) { return xx / n * 360 - 180; };
    var lat = function (yy) { return Math.atan(Math.sinh(Math.PI * (1 - 2 * yy / n))) * 180 / Math.PI; };
    return [lon(x), lat(y + 1), lon(x + 1), lat(y)];
  }

  function refusedGeoJSON() {
    var features = [];
    refusedTiles.forEach(function (t) {
      var b = tileBounds(t.z, t.x, t.y);
      features.push({
        type: 'Feature',
        properties: { layer: t.layer, tile: t.z + '/' + t.x + '/' + t.y, final: t.final, attempts: t.attempts },
        geometry: {
          type: 'Polygon',
          coordinates: [[[b[0], b[1]], [b[2], b[1]], [b[2], b[3]], [b[0], b[3]], [b[0], b[1]]]],
        },
      });
    });
    return { type: 'FeatureCollection', features: features };
  }

  var map; // set below
  function updateRefused() {
    state.refusedTiles = Array.from(refusedTiles.values());
    var src = map && map.getSource(REFUSED_SOURCE);
    if (src) src.setData(refusedGeoJSON());
    render();
  }

  function markRefused(tile, resp, cost, detail) {
    var wait = retryAfter(resp.headers);
    state.refused++;
    layerStats(tile.layer).refused++;
    var t = refusedTiles.get(tile.key);
    if (!t) {
      t = { layer: tile.layer, z: tile.z, x: tile.x, y: tile.y, attempts: 0, final: false };
      refusedTiles.set(tile.key, t);
    }
    t.attempts++;
    t.retryAfter = wait;
    t.final = wait > MAX_RETRY_WAIT;
    state.lastRefusal = { layer: tile.layer, z: tile.z, x: tile.x, y: tile.y, retryAfter: wait, cost: cost, detail: detail };
    flash();
    updateRefused();
    return t;
  }

  function clearRefused(tile) {
    if (refusedTiles.delete(tile.key)) updateRefused();
  }

  // ------------------------------------------------------------ protocol --

  var TILE_PATH = /^tiles\/([A-Za-z0-9_,-]{1,600})\/(\d{1,2})\/(\d{1,7})\/(\d{1,7})\.mvt$/;

  function abortError() {
    return new DOMException('The tile request was aborted', 'AbortError');
  }

  function sleep(ms, signal) {
    return new Promise(function (resolve, reject) {
      if (signal.aborted) return reject(abortError());
      var timer = window.setTimeout(function () {
        signal.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      function onAbort() {
        window.clearTimeout(timer);
        reject(abortError());
      }
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  function tileError(status, message) {
    var err = new Error(message);
    err.status = status;
    return err;
  }

  // After a 429 the page stops spending in parallel: refused tiles, and any
  // tile asked for meanwhile, wait in one FIFO queue and are sent one at a
  // time, the head only after the last Retry-After. As nothing else of this
  // page spends in the meantime, the head is admitted once its Retry-After
  // is over — an expensive tile is never starved by cheap ones — and the
  // page does not hammer a server that said "not yet". When the queue
  // drains, tiles load in parallel again.
  var waiting = []; // tickets, FIFO
  var notBefore = 0; // Date.now() before which no tile is sent

  function throttled() { return waiting.length > 0 || Date.now() < notBefore; }

  // loadTile fetches geotoll://tiles/{layer}/{z}/{x}/{y}.mvt from this
  // server, records the budget headers, and retries a refused tile after
  // Retry-After until it is admitted or MapLibre aborts it. Every request
  // goes to the server, so that every response the meter sees is one the
  // server priced: cache 'no-cache' revalidates a tile the browser holds
  // (If-None-Match; the 304's budget headers replace the stored ones) and
  // asks for others with Cache-Control: max-age=0. Neither is "no-cache"
  // to the server, so its tile cache answers, at a hit's price. ('no-store'
  // and 'reload' send Cache-Control: no-cache, which the server reads as
  // "render afresh, priced in full"; 'default' would answer from the
  // browser's cache, unpriced, and the meter would count the cost twice.)
  async function loadTile(params, abortController) {
    var path = params.url.replace(/^geotoll:\/\//, '');
    var m = TILE_PATH.exec(path);
    if (!m) throw tileError(0, 'not a geotoll tile URL: ' + params.url);
    var tile = { layer: m[1], z: +m[2], x: +m[3], y: +m[4] };
    tile.key = tile.layer + '/' + tile.z + '/' + tile.x + '/' + tile.y;
    var url = new URL(BASE + '/' + path, window.location.origin).href;
    var headers = { Accept: 'application/vnd.mapbox-vector-tile' };
    if (apiKey) headers['X-API-Key'] = apiKey;
    var signal = abortController.signal;
    var ticket = null;
    var unavailableOnce = false; // a 503 was asked again (below)
    try {
      for (;;) {
        if (ticket === null && throttled()) {
          ticket = { key: tile.key };
          waiting.push(ticket);
          render();
        }
        while (ticket !== null && (waiting[0] !== ticket || Date.now() < notBefore)) {
          await sleep(Math.max(50, notBefore - Date.now()), signal);
        }
        var resp = await fetch(url, { headers: headers, signal: signal, cache: 'no-cache', credentials: 'omit' });
        var b = observe(resp, tile);
        if (resp.status === 200) {
          spend(resp, b, null);
          var data = await resp.arrayBuffer();
          state.loaded++;
          layerStats(tile.layer).loaded++;
          clearRefused(tile);
          return { data: data };
        }
        if (resp.status === 204) {
          spend(resp, b, null);
          state.loaded++;
          layerStats(tile.layer).loaded++;
          layerStats(tile.layer).empty++;
          clearRefused(tile);
          return { data: new ArrayBuffer(0) }; // an empty tile
        }
        var body = await resp.text().catch(function () { return ''; });
        var detail = body;
        var problem = null;
        try {
          var doc = JSON.parse(body);
          if (doc && typeof doc === 'object') {
            problem = doc;
            detail = doc.detail || body;
          }
        } catch (e) { /* not JSON */ }
        spend(resp, b, problem);
        if (resp.status === 429) {
          var t = markRefused(tile, resp, num(resp.headers.get('X-Request-Cost')), detail);
          if (t.final) {
            state.gaveUp++;
            return { data: new ArrayBuffer(0) }; // see MAX_RETRY_WAIT
          }
          notBefore = Math.max(notBefore, Date.now() + Math.max(0.25, t.retryAfter) * 1000);
          state.retries++;
          continue;
        }
        // A 503 with a Retry-After is the server's database busy (every
        // connection in use, or the caller's share of them): the tile is
        // asked again once after that wait, as a map client should, before
        // it counts as an error.
        var wait = num(resp.headers.get('Retry-After'));
        if (resp.status === 503 && wait !== null && !unavailableOnce && wait <= MAX_RETRY_WAIT) {
          unavailableOnce = true;
          state.retries++;
          await sleep(Math.max(0.25, wait) * 1000, signal);
          continue;
        }
        state.errors++;
        render();
        throw tileError(resp.status, 'tile ' + tile.key + ': ' + resp.status + ' ' + detail);
      }
    } catch (err) {
      if (err && err.name === 'AbortError') {
        // MapLibre no longer wants this tile: forget its outline too.
        var entry = refusedTiles.get(tile.key);
        if (entry && !entry.final) clearRefused(tile);
      }
      throw err;
    } finally {
      if (ticket !== null) {
        var i = waiting.indexOf(ticket);
        if (i >= 0) waiting.splice(i, 1);
        render();
      }
    }
  }

  // ------------------------------------------------------------- catalog --

  function normalizeLayer(item) {
    if (typeof item === 'string') item = { name: item };
    if (!item || typeof item !== 'object') return null;
    var name = item.id !== undefined && item.name === undefined ? item.id : (item.name || item.layer);
    if (typeof name !== 'string' || !LAYER_NAME.test(name)) return null;
    var minzoom = num(item.minzoom !== undefined ? item.minzoom : (item.min_zoom !== undefined ? item.min_zoom : item.minZoom));
    var maxzoom = num(item.maxzoom !== undefined ? item.maxzoom : (item.max_zoom !== undefined ? item.max_zoom : item.maxZoom));
    return {
      name: name,
      minzoom: minzoom === null ? 0 : Math.max(0, Math.min(22, minzoom)),
      maxzoom: maxzoom === null ? 22 : Math.max(0, Math.min(22, maxzoom)),
    };
  }

  // layersFrom accepts the likely shapes of a /tiles catalog: a list of
  // names or layer objects, {layers: [...]}, TileJSON's {vector_layers:
  // [{id, minzoom, maxzoom}]}, {layers: {name: {...}}}, or {name: {...}}.
  function layersFrom(json) {
    var items = json;
    if (json && !Array.isArray(json) && typeof json === 'object') {
      items = json.layers !== undefined ? json.layers : (json.vector_layers !== undefined ? json.vector_layers : json);
      if (items && !Array.isArray(items) && typeof items === 'object') {
        var byName = items;
        items = Object.keys(byName).filter(function (k) {
          var v = byName[k];
          return v && typeof v === 'object' && !Array.isArray(v);
        }).map(function (k) {
          return Object.assign({}, byName[k], { name: k });
        });
      }
    }
    if (!Array.isArray(items)) return [];
    var seen = Object.create(null); // a layer may be called constructor or __proto__
    var out = [];
    items.map(normalizeLayer).forEach(function (l) {
      if (l && !seen[l.name] && l.minzoom <= l.maxzoom) {
        seen[l.name] = true;
        out.push(l);
      }
    });
    return out;
  }

  async function loadCatalog() {
    var ctl = new AbortController();
    var timer = window.setTimeout(function () { ctl.abort(); }, CATALOG_TIMEOUT_MS);
    try {
      var resp = await fetch(BASE + '/tiles', { headers: { Accept: 'application/json' }, signal: ctl.signal, cache: 'no-store' });
      if (resp.ok && /json/.test(resp.headers.get('Content-Type') || '')) {
        var layers = layersFrom(await resp.json());
        if (layers.length) return { source: 'server', layers: layers };
      }
    } catch (e) {
      // No catalog: the built-in list below.
    } finally {
      window.clearTimeout(timer);
    }
    return { source: 'fallback', layers: FALLBACK_LAYERS.map(function (l) { return Object.assign({}, l); }) };
  }

  // --------------------------------------------------------------- style --

  function sourceId(name) { return 'gt-' + name; }

  function styleLayers(l) {
    var src = sourceId(l.name);
    return {
      fill: {
        id: src + '-fill', type: 'fill', source: src, 'source-layer': l.name,
        filter: ['==', '$type', 'Polygon'],
        paint: { 'fill-color': l.color, 'fill-opacity': 0.16 },
      },
      line: {
        id: src + '-line', type: 'line', source: src, 'source-layer': l.name,
        filter: ['!=', '$type', 'Point'],
        paint: { 'line-color': l.color, 'line-width': ['interpolate', ['linear'], ['zoom'], 4, 0.6, 12, 1.6], 'line-opacity': 0.9 },
      },
      circle: {
        id: src + '-circle', type: 'circle', source: src, 'source-layer': l.name,
        filter: ['==', '$type', 'Point'],
        paint: {
          'circle-color': l.color,
          // A cluster (point_count > 1: the server merges the points of
          // one cell at low zooms) grows with the log of its count.
          'circle-radius': ['interpolate', ['linear'], ['zoom'],
            2, ['+', 1.2, ['*', 0.9, ['ln', ['coalesce', ['get', 'point_count'], 1]]]],
            10, ['+', 2.6, ['*', 0.9, ['ln', ['coalesce', ['get', 'point_count'], 1]]]],
            16, 6],
          'circle-opacity': 0.85,
          'circle-stroke-color': '#ffffff',
          'circle-stroke-width': ['interpolate', ['linear'], ['zoom'], 8, 0, 12, 0.8],
        },
      },
    };
  }

  function buildStyle(layers) {
    var style = {
      version: 8,
      sources: {},
      layers: [{ id: 'background', type: 'background', paint: { 'background-color': '#eef0ec' } }],
    };
    var parts = layers.map(styleLayers);
    layers.forEach(function (l) {
      style.sources[sourceId(l.name)] = {
        type: 'vector',
        tiles: ['geotoll://tiles/' + l.name + '/{z}/{x}/{y}.mvt'],
        minzoom: l.minzoom,
        maxzoom: Math.min(l.maxzoom, MAX_SOURCE_ZOOM),
      };
    });
    // Polygons under lines under points, whatever layer they come from.
    ['fill', 'line', 'circle'].forEach(function (kind) {
      parts.forEach(function (p) { style.layers.push(p[kind]); });
    });
    style.sources[REFUSED_SOURCE] = { type: 'geojson', data: { type: 'FeatureCollection', features: [] } };
    style.layers.push(
      { id: 'refused-fill', type: 'fill', source: REFUSED_SOURCE, paint: { 'fill-color': '#cf222e', 'fill-opacity': 0.07 } },
      {
        id: 'refused-line', type: 'line', source: REFUSED_SOURCE,
        paint: { 'line-color': '#cf222e', 'line-width': ['case', ['get', 'final'], 3, 2], 'line-opacity': 0.9 },
      }
    );
    return style;
  }

  // -------------------------------------------------------------- panel --

  function setVisible(ids, on) {
    ids.forEach(function (id) {
      if (map.getLayer(id)) map.setLayoutProperty(id, 'visibility', on ? 'visible' : 'none');
    });
  }

  function buildLayerList(layers) {
    var ul = $('layers');
    ul.textContent = '';
    layers.forEach(function (l) {
      var li = document.createElement('li');
      var label = document.createElement('label');
      label.className = 'toggle';
      var box = document.createElement('input');
      box.type = 'checkbox';
      box.checked = true;
      box.dataset.layer = l.name;
      var swatch = document.createElement('span');
      swatch.className = 'swatch';
      swatch.style.background = l.color;
      var name = document.createElement('span');
      name.className = 'name';
      name.textContent = l.name;
      if (l.minzoom > 0) {
        var zoom = document.createElement('small');
        zoom.className = 'muted';
        zoom.title = 'drawn from zoom ' + l.minzoom;
        zoom.textContent = ' z' + l.minzoom + '+';
        name.append(zoom);
      }
      var count = document.createElement('span');
      count.className = 'count';
      count.dataset.count = l.name;
      count.title = 'tile responses · of which refused (429)';
      count.textContent = '0';
      label.append(box, swatch, name, count);
      li.append(label);
      ul.append(li);
      var s = styleLayers(l);
      box.addEventListener('change', function () {
        setVisible([s.fill.id, s.line.id, s.circle.id], box.checked);
      });
    });
    $('toggle-refused').addEventListener('change', function (e) {
      setVisible(['refused-fill', 'refused-line'], e.target.checked);
    });
  }

  function showView() {
    var c = map.getCenter();
    $('view').textContent = 'z ' + map.getZoom().toFixed(2) + ' · ' + c.lng.toFixed(4) + ', ' + c.lat.toFixed(4);
  }

  function inspect(e) {
    var ids = [];
    state.layers.forEach(function (l) {
      var s = styleLayers(l);
      ids.push(s.circle.id, s.line.id, s.fill.id);
    });
    var pad = 4;
    var box = [[e.point.x - pad, e.point.y - pad], [e.point.x + pad, e.point.y + pad]];
    var f = map.queryRenderedFeatures(box, { layers: ids.filter(function (id) { return map.getLayer(id); }) })[0];
    var out = $('inspect');
    out.textContent = '';
    if (!f) {
      out.textContent = 'No feature here.';
      return;
    }
    var table = document.createElement('table');
    var rows = [['layer', f.sourceLayer], ['id', f.id === undefined ? '–' : String(f.id)]];
    Object.keys(f.properties).forEach(function (k) { rows.push([k, String(f.properties[k])]); });
    rows.forEach(function (r) {
      var tr = document.createElement('tr');
      var a = document.createElement('td');
      var b = document.createElement('td');
      a.textContent = r[0];
      b.textContent = r[1];
      tr.append(a, b);
      table.append(tr);
    });
    out.append(table);
  }

  // --------------------------------------------------------------- start --

  async function start() {
    maplibregl.addProtocol('geotoll', loadTile);
    $('maplibre-version').textContent = maplibregl.getVersion ? maplibregl.getVersion() : '';
    seedBudget();
    var cat = await loadCatalog();
    cat.layers.forEach(function (l, i) { l.color = PALETTE[i % PALETTE.length]; });
    state.catalog = cat.source;
    state.layers = cat.layers;
    $('catalog').textContent = cat.source === 'server' ? 'from /tiles' : 'built-in';

    map = new maplibregl.Map({
      container: 'map',
      style: buildStyle(cat.layers),
      center: INITIAL.center,
      zoom: INITIAL.zoom,
      maxZoom: 22,
      hash: true,
      attributionControl: false,
    });
    window.geotollMap = map;
    map.addControl(new maplibregl.NavigationControl({ showCompass: false }), 'top-right');
    map.addControl(new maplibregl.ScaleControl(), 'bottom-right');
    buildLayerList(cat.layers);

    map.on('load', function () { state.ready = true; });
    map.on('idle', function () { state.idleCount++; });
    map.on('sourcedata', function (e) {
      // A tile parsed and ready to draw (after the worker, unlike loaded).
      if (e.tile && e.tile.state === 'loaded' && e.sourceId.indexOf('gt-') === 0 && e.tile.tileID) {
        var k = e.sourceId.slice(3) + '/' + e.tile.tileID.canonical.z;
        state.drawn[k] = (state.drawn[k] || 0) + 1;
      }
    });
    map.on('moveend', showView);
    map.on('click', inspect);
    map.on('error', function (e) {
      // MapLibre asks for no frame when a tile ends in an error, and fires
      // 'load' and 'idle' only from a frame: were that tile the last one
      // pending, the map would never say it is done. A frame now does.
      if (e && e.tile) map.triggerRepaint();
      var err = e && e.error;
      if (err && (err.status === 429 || err.name === 'AbortError')) return; // shown on the map and in the meter
      console.warn('geotoll preview:', err && err.message ? err.message : e);
    });
    showView();
    render();
  }

  start().catch(function (err) {
    console.error('geotoll preview failed to start:', err);
    $('inspect').textContent = 'The map failed to start: ' + (err && err.message ? err.message : err);
  });
})();
