// One HTTP request for the k6 stand-in: node fetch.mjs METHOD URL HEADERS BODY
// prints {status, headers, body, duration}; a body that is not JSON is left
// out. duration is the request's time in ms, from sending it to the end of
// the answer's body (k6's timings.duration; this one includes connecting).
const [method, url, headers, body] = process.argv.slice(2);
const start = performance.now();
const res = await fetch(url, { method, headers: JSON.parse(headers), body: method === 'GET' ? undefined : body });
const buf = Buffer.from(await res.arrayBuffer());
const duration = performance.now() - start;
const json = /json/.test(res.headers.get('content-type') || '');
process.stdout.write(JSON.stringify({ status: res.status, headers: Object.fromEntries(res.headers), body: json ? buf.toString('utf8') : null, duration }));
