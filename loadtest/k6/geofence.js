// k6 load test of a fleet tracker: positions checked against geofences,
// and radius searches. Against `make run`, in a second shell:
//
//   k6 run -e API_KEY="$KEY" loadtest/k6/geofence.js
//
// Each iteration sends one batch check of BATCH vehicle positions near the
// demo cities, as a tracker would every few seconds, and one small radius
// search. Requests are tagged by route; a 429 is an expected answer with
// its own rate metric (geotoll_refused); the thresholds fail the run when
// answers are wrong or slow. Slow is measured on geotoll_answered_duration,
// the time of the requests answered (any status but 429), tagged by route:
// http_req_duration holds the refusals too, whose time is the budget's, not
// an answer's — next to none, or as long as the server holds them
// (throttle.tarpit) — so its percentiles say little of the answers in a run
// refused most of the time.
import http from 'k6/http';
import { check } from 'k6';
import { Rate, Trend } from 'k6/metrics';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const KEY = __ENV.API_KEY || '';
const BATCH = parseInt(__ENV.BATCH || '100', 10);
const CITIES = [[13.405, 52.52], [-0.1276, 51.5072], [2.3522, 48.8566], [139.6503, 35.6762], [-74.006, 40.7128]];
const CHECK = '/geofence/check';
const WITHIN = '/geofence/within';

const refused = new Rate('geotoll_refused');
// Time of the requests answered (any status but 429), the latency thresholds'.
const answeredDuration = new Trend('geotoll_answered_duration', true);

http.setResponseCallback(http.expectedStatuses(200, 429));

export const options = {
  scenarios: {
    fleet: {
      executor: 'constant-arrival-rate', rate: parseInt(__ENV.RATE || '20', 10), timeUnit: '1s',
      duration: __ENV.DURATION || '30s', preAllocatedVUs: 10, maxVUs: 100,
    },
  },
  thresholds: {
    checks: ['rate>0.99'],
    http_req_failed: ['rate<0.01'],
    // latency of the answers only, not of the refusals
    'geotoll_answered_duration{route:/geofence/check}': ['p(95)<500'],
    'geotoll_answered_duration{route:/geofence/within}': ['p(95)<250'],
    geotoll_refused: ['rate<0.9'],
    // nor a route of nothing but refusals, whose answers' latency has no sample
    'geotoll_refused{route:/geofence/check}': ['rate<0.9'],
    'geotoll_refused{route:/geofence/within}': ['rate<0.9'],
  },
};

function headers() {
  return Object.assign({ 'Content-Type': 'application/json' }, KEY ? { 'X-API-Key': KEY } : {});
}

function answered(res, route) {
  refused.add(res.status === 429, { route });
  if (res.status !== 429) answeredDuration.add(res.timings.duration, { route });
  check(res, {
    'answered or honestly refused': (r) => r.status === 200 || (r.status === 429 && r.headers['Retry-After'] !== undefined),
  }, { route });
}

export default function () {
  const points = [];
  for (let i = 0; i < BATCH; i++) {
    const [lon, lat] = CITIES[i % CITIES.length];
    points.push({ id: `v${i}`, lng: lon + (Math.random() - 0.5) * 0.1, lat: lat + (Math.random() - 0.5) * 0.1 });
  }
  answered(http.post(`${BASE}${CHECK}`, JSON.stringify({ points }), { headers: headers(), tags: { name: CHECK, route: CHECK } }), CHECK);
  const [lon, lat] = CITIES[Math.floor(Math.random() * CITIES.length)];
  const q = `layer=places&lng=${lon}&lat=${lat}&radius=500&limit=20`;
  answered(http.get(`${BASE}${WITHIN}?${q}`, { headers: headers(), tags: { name: WITHIN, route: WITHIN } }), WITHIN);
}
