#!/usr/bin/env python3
# A map user zooming out over Berlin from z16 to z2 with one API key: at each
# zoom the tiles of a 1920x1080 viewport (512-px tiles) of the three demo
# layers, six at a time as a browser fetches them, then an optional pause.
# Prints per zoom the time to fill, the statuses and the tokens charged
# (X-Request-Cost). Usage: zoomout.py BASE_URL API_KEY [PAUSE_SECONDS]
# LAYERS (comma-separated, e.g. countries for the open data) and CENTER
# (lon,lat, e.g. -74.0,40.7 for New York) in the environment change the
# layers and the place.
import math, os, time, sys, concurrent.futures, urllib.request
base, key = sys.argv[1], sys.argv[2]
lon, lat = (float(v) for v in os.environ.get("CENTER", "13.40,52.52").split(","))
layers = os.environ.get("LAYERS", "places,districts,geofences").split(",")
def tile(z, lo, la):
    n = 2**z
    x = (lo+180)/360*n
    y = (1-math.log(math.tan(math.radians(la))+1/math.cos(math.radians(la)))/math.pi)/2*n
    return x, y
def get(u):
    req = urllib.request.Request(u, headers={"X-API-Key": key})
    try:
        with urllib.request.urlopen(req) as r:
            r.read(); return r.status, float(r.headers.get("X-Request-Cost") or 0)
    except urllib.error.HTTPError as e:
        return e.code, 0.0
total=0
for z in range(16, 1, -1):
    cx, cy = tile(z, lon, lat)
    # a 1920x1080 viewport of 512-px tiles: 3.75 x 2.1 tiles, plus the partial ones
    xs = range(int(cx-1.9), int(cx+1.9)+1); ys = range(int(cy-1.1), int(cy+1.1)+1)
    urls = [f"{base}/tiles/{l}/{z}/{x % 2**z}/{y}.mvt" for l in layers for x in xs for y in ys if 0 <= y < 2**z]
    t0=time.time()
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        res=list(ex.map(get, urls))
    dt=time.time()-t0
    st={}
    for s,_ in res: st[s]=st.get(s,0)+1
    spent=sum(c for _,c in res); total+=spent
    time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0)
    print(f"z{z:2d} {len(urls):3d} tiles {dt*1000:6.0f} ms statuses {st} tokens {spent:.2f}")
print(f"total tokens {total:.2f}")
