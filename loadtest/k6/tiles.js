// k6 load test for geotoll tiles. Usage:
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e API_KEY=gt_... -e ZOOM=14 loadtest/k6/tiles.js
// Requests random tiles around the demo cities at ZOOM and checks that every
// answer is a tile (200/204) or an honest refusal (429 with Retry-After).
import http from 'k6/http';
import { check } from 'k6';
import { Counter, Trend } from 'k6/metrics';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const KEY = __ENV.API_KEY || '';
const ZOOM = parseInt(__ENV.ZOOM || '14', 10);
const LAYER = __ENV.LAYER || 'places';
const CITIES = [[13.405, 52.52], [-0.1276, 51.5072], [2.3522, 48.8566], [139.6503, 35.6762],
  [-74.006, 40.7128], [77.209, 28.6139], [-46.6333, -23.5505], [151.2093, -33.8688]];

const refused = new Counter('geotoll_refused');
const cost = new Trend('geotoll_request_cost');

export const options = {
  scenarios: { tiles: { executor: 'constant-arrival-rate', rate: parseInt(__ENV.RATE || '50', 10),
    timeUnit: '1s', duration: __ENV.DURATION || '30s', preAllocatedVUs: 20, maxVUs: 200 } },
  thresholds: { checks: ['rate>0.99'], http_req_duration: ['p(95)<1000'] },
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
  const [x, y] = tileOf(lon + (Math.random() - 0.5) * 0.05, lat + (Math.random() - 0.5) * 0.05, ZOOM);
  const res = http.get(`${BASE}/tiles/${LAYER}/${ZOOM}/${x}/${y}.mvt`, { headers: KEY ? { 'X-API-Key': KEY } : {} });
  if (res.headers['X-Request-Cost']) cost.add(parseFloat(res.headers['X-Request-Cost']));
  if (res.status === 429) refused.add(1);
  check(res, {
    'tile or honest refusal': (r) => r.status === 200 || r.status === 204 || (r.status === 429 && r.headers['Retry-After']),
    'budget headers': (r) => r.status >= 500 || r.headers['Ratelimit'] !== undefined,
  });
}
