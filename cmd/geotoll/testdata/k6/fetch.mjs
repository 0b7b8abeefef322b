// One HTTP request for the k6 stand-in: node fetch.mjs METHOD URL HEADERS BODY
// prints {status, headers, body}; a body that is not JSON is left out.
const [method, url, headers, body] = process.argv.slice(2);
const res = await fetch(url, { method, headers: JSON.parse(headers), body: method === 'GET' ? undefined : body });
const buf = Buffer.from(await res.arrayBuffer());
const json = /json/.test(res.headers.get('content-type') || '');
process.stdout.write(JSON.stringify({ status: res.status, headers: Object.fromEntries(res.headers), body: json ? buf.toString('utf8') : null }));
