#!/usr/bin/env python3
# Point-in-polygon through POST /geofence/check?layer=… on two layers of
# the same polygons, one request after another on one connection: the same
# seeded random points (lon/lat uniform over -180..180 x -56..72), in the
# same batches, alternately to layer A and layer B. Prints each layer's
# points/s (database and server included, client time excluded) and the
# points whose answers differ. LAYER_B "-" times layer A alone. Usage:
#   pip.py BASE_URL API_KEY LAYER_A LAYER_B [POINTS [BATCH [SEED]]]
import http.client, json, random, sys, time, urllib.parse
base, key, layer_a, layer_b = sys.argv[1:5]
n = int(sys.argv[5]) if len(sys.argv) > 5 else 500
batch = int(sys.argv[6]) if len(sys.argv) > 6 else 10
rng = random.Random(int(sys.argv[7]) if len(sys.argv) > 7 else 18)
pts = [{"id": str(i), "lng": rng.uniform(-180, 180), "lat": rng.uniform(-56, 72)} for i in range(n)]
u = urllib.parse.urlsplit(base)
conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
def check(layer, chunk):
    body = json.dumps({"points": chunk}).encode()
    t0 = time.perf_counter()
    conn.request("POST", u.path + "/geofence/check?layer=" + urllib.parse.quote(layer), body,
                 {"X-API-Key": key, "Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        sys.exit(f"{layer}: {r.status} {data[:300]!r}")
    return dt, [res["fences"] for res in json.loads(data)["results"]]
layers = (layer_a,) if layer_b == "-" else (layer_a, layer_b)
spent = {l: 0.0 for l in layers}
answers = {l: [] for l in layers}
for i in range(0, n, batch):
    chunk = pts[i:i + batch]
    for layer in layers:
        dt, got = check(layer, chunk)
        spent[layer] += dt
        answers[layer] += got
inside = sum(1 for a in answers[layer_a] if a)
for layer in layers:
    print(f"{layer:20s} {n} points in batches of {batch}: {spent[layer]:8.2f} s  {n / spent[layer]:10.1f} points/s")
if len(layers) == 1:
    sys.exit(print(f"{inside} points inside a polygon of {layer_a}"))
differ = [(pts[i]["lng"], pts[i]["lat"], a, b) for i, (a, b) in enumerate(zip(answers[layer_a], answers[layer_b])) if a != b]
print(f"ratio {spent[layer_a] / spent[layer_b]:.1f}x; {inside} points inside a polygon of {layer_a}; {len(differ)} answers differ")
for d in differ[:20]:
    print("  differs at [%.6f, %.6f]: %s %s, %s %s" % (d[0], d[1], layer_a, d[2], layer_b, d[3]))
