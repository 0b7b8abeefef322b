// k6 load test of geotoll's tiles. Against `make run`, in a second shell:
//
//   k6 run loadtest/k6/tiles.js                                   anonymous, zooms 8–14
//   k6 run -e API_KEY="$KEY" -e ZOOMS=14 -e RATE=100 loadtest/k6/tiles.js
//
// Each request is a random tile around the demo cities at one of ZOOMS.
// Requests are tagged by route (the route's path, as geotoll's metrics name
// it) and zoom, so a run has one time series per route and zoom, not one per
// URL. A 200, 204 or 304 (not modified, for a conditional request) is a
// tile; a 429 is an expected answer too — the budget doing its job — with
// its own rate metric, geotoll_refused; failures are anything else. The
// thresholds fail the run when answers are wrong or slow. Slow is measured
// on geotoll_answered_duration, the time of the requests answered (any
// status but 429), tagged as they are: http_req_duration holds the refusals
// too, whose time is the budget's, not a tile's — next to none, or as long
// as the server holds them (throttle.tarpit) — so its percentiles say
// little of the tiles in a run refused most of the time.
import http from 'k6/http';
import { check } from 'k6';
import { Rate, Trend } from 'k6/metrics';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const KEY = __ENV.API_KEY || '';
const ZOOMS = (__ENV.ZOOMS || '8,10,12,14').split(',').map((z) => parseInt(z, 10));
const LAYER = __ENV.LAYER || 'places';
const ROUTE = '/tiles/{layer}/{z}/{x}/{y}';
const CITIES = [[13.405, 52.52], [-0.1276, 51.5072], [2.3522, 48.8566], [139.6503, 35.6762],
  [-74.006, 40.7128], [77.209, 28.6139], [-46.6333, -23.5505], [151.2093, -33.8688]];

// Share of requests refused by the budget (429), and the price of those
// that were charged.
const refused = new Rate('geotoll_refused');
const cost = new Trend('geotoll_request_cost');
// Time of the requests answered (any status but 429), the latency thresholds'.
const answeredDuration = new Trend('geotoll_answered_duration', true);

// 429 is an expected status: it does not count in http_req_failed.
http.setResponseCallback(http.expectedStatuses(200, 204, 304, 429));

export const options = {
  scenarios: {
    tiles: {
      executor: 'constant-arrival-rate', rate: parseInt(__ENV.RATE || '50', 10), timeUnit: '1s',
      duration: __ENV.DURATION || '30s', preAllocatedVUs: 20, maxVUs: 200,
    },
  },
  thresholds: {
    checks: ['rate>0.99'], // every answer a tile or an honest refusal
    http_req_failed: ['rate<0.01'], // 5xx, timeouts, anything unexpected
    // latency of the answers only, not of the refusals
    'geotoll_answered_duration{route:/tiles/{layer}/{z}/{x}/{y}}': ['p(95)<1000'],
    'geotoll_answered_duration{zoom:14}': ['p(95)<250'],
    geotoll_refused: ['rate<0.9'], // refusals are expected, a run of nothing but refusals is not
    // nor a route of nothing but refusals, whose answers' latency has no sample
    'geotoll_refused{route:/tiles/{layer}/{z}/{x}/{y}}': ['rate<0.9'],
  },
};

function tileOf(lon, lat, z) {
  const n = 2 ** z;
  const x = Math.floor(((lon + 180) / 360) * n);
  const r = (lat * Math.PI) / 180;
  const y = Math.floor(((1 - Math.log(Math.tan(r) + 1 / Math.cos(r)) / Math.PI) / 2) * n);
  return [x, y];
}

export default function () {
  const [lon, lat] = CITIES[Math.floor(Math.random() * CITIES.length)];
  const z = ZOOMS[Math.floor(Math.random() * ZOOMS.length)];
  const [x, y] = tileOf(lon + (Math.random() - 0.5) * 0.05, lat + (Math.random() - 0.5) * 0.05, z);
  const res = http.get(`${BASE}/tiles/${LAYER}/${z}/${x}/${y}.mvt`, {
    headers: KEY ? { 'X-API-Key': KEY } : {},
    tags: { name: ROUTE, route: ROUTE, zoom: String(z) },
  });
  refused.add(res.status === 429, { route: ROUTE, zoom: String(z) });
  if (res.status !== 429) {
    answeredDuration.add(res.timings.duration, { route: ROUTE, zoom: String(z) });
  }
  if (res.status !== 429 && res.headers['X-Request-Cost']) {
    cost.add(parseFloat(res.headers['X-Request-Cost']), { zoom: String(z) });
  }
  check(res, {
    'tile or honest refusal': (r) => r.status === 200 || r.status === 204 || r.status === 304 || (r.status === 429 && r.headers['Retry-After'] !== undefined),
    'budget headers': (r) => r.headers['Ratelimit-Policy'] !== undefined && r.headers['Ratelimit'] !== undefined,
  }, { route: ROUTE, zoom: String(z) });
}
