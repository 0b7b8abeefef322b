// k6 load test for a fleet tracker: positions checked against geofences.
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e API_KEY=gt_... loadtest/k6/geofence.js
// Each iteration sends one batch check of BATCH vehicle positions near the
// demo cities, as a tracker would every few seconds.
import http from 'k6/http';
import { check } from 'k6';

const BASE = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const KEY = __ENV.API_KEY || '';
const BATCH = parseInt(__ENV.BATCH || '100', 10);
const CITIES = [[13.405, 52.52], [-0.1276, 51.5072], [2.3522, 48.8566], [139.6503, 35.6762], [-74.006, 40.7128]];

export const options = {
  scenarios: { fleet: { executor: 'constant-arrival-rate', rate: parseInt(__ENV.RATE || '20', 10),
    timeUnit: '1s', duration: __ENV.DURATION || '30s', preAllocatedVUs: 10, maxVUs: 100 } },
  thresholds: { checks: ['rate>0.99'] },
};

export default function () {
  const points = [];
  for (let i = 0; i < BATCH; i++) {
    const [lon, lat] = CITIES[i % CITIES.length];
    points.push({ id: `v${i}`, lng: lon + (Math.random() - 0.5) * 0.1, lat: lat + (Math.random() - 0.5) * 0.1 });
  }
  const res = http.post(`${BASE}/geofence/check`, JSON.stringify({ points }), {
    headers: Object.assign({ 'Content-Type': 'application/json' }, KEY ? { 'X-API-Key': KEY } : {}),
  });
  check(res, { 'answered or honestly refused': (r) => r.status === 200 || (r.status === 429 && r.headers['Retry-After']) });
}
