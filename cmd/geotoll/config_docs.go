package main

import (
	"fmt"
	"io"
	"reflect"
	"strings"
)

// configDoc documents one configuration key: the README's reference
// table (geotoll config doc) and the example file are made from these, and
// a test fails when a key has none.
type configDoc struct {
	Key     string
	Default string // as shown; empty: the value in DefaultConfig
	Meaning string
}

// tierPattern stands for a tier's name in documented keys.
const tierPattern = "<tier>"

// docKey is the documented key of a setting: a tier's name is
// tierPattern.
func docKey(key string) string {
	parts := strings.Split(key, ".")
	if len(parts) == 4 && parts[0] == "throttle" && parts[1] == "tiers" {
		parts[2] = tierPattern
	}
	return strings.Join(parts, ".")
}

// configDocs documents every key, in the order of the reference.
func configDocs() []configDoc {
	docs := []configDoc{
		{Key: "listen", Meaning: `the public listen address, host:port (":8080" every interface, "127.0.0.1:8080" loopback only); required (alias LISTEN)`},
		{Key: "metrics_listen", Default: "none", Meaning: "a second listener (host:port) for /metrics, /healthz and the detailed /readyz, on a network only operators reach: the production setting. Set, the public listener serves no /metrics and a /readyz without detail"},
		{Key: "base_path", Default: "none", Meaning: `the path prefix a reverse proxy serves geotoll under ("/maps"): the routes answer under it and every URL the server writes (TileJSON, catalog, fence pages, the preview page) starts with it. A path: "/" and segments of letters, digits, -, ., _ and ~ (none of them . or ..)`},
		{Key: "log_level", Meaning: "debug, info, warn or error"},
		{Key: "log_format", Meaning: "json or text"},
		{Key: "database.url", Default: "none", Meaning: "the read connection of serve, as the geotoll_reader role (alias DATABASE_URL; secret: GEOTOLL_DATABASE_URL_FILE); its sessions' application_name is geotoll (the server's own work's: geotoll-background) unless the URL sets one"},
		{Key: "database.admin_url", Default: "database.url", Meaning: "the schema owner for migrate, seed, keys and opendata (alias GEOTOLL_ADMIN_DATABASE_URL, flag alias -admin-database-url; secret)"},
		{Key: "database.max_conns", Meaning: "read pool size: how many request statements run at once (the server's own work has background_conns). About the database's CPU cores: statements beyond them only share its CPU, and every caller's statement, the honest one's too, then takes longer; more wait for a connection, within acquire_timeout"},
		{Key: "database.key_max_conns", Meaning: "of max_conns, how many one API key's statements use at once, so that no key (with statements that ignore cancellation, say) holds every connection; one more waits for a slot within acquire_timeout, then 503. 0, or max_conns or more: no cap. Off by default: a cap below the pool also caps what one busy key gets from an otherwise idle database"},
		{Key: "database.background_conns", Meaning: "the read role's second pool, for the server's own work: price-model builds (4 at once, never more than background_conns minus 1, so that the rest of this work never waits a build's length for a connection), the serving registry's refresh, layer checks, API keys; it never takes a request's connection, nor a request its (at least 2). Its sessions are read only, each statement at most 5 s (unless the URL's options set default_transaction_read_only or statement_timeout)"},
		{Key: "database.anonymous_max_conns", Meaning: "of max_conns, how many the anonymous callers' statements use at once, all of them together (a crawl from many addresses adds their buckets up); one more waits for a slot within acquire_timeout, then 503. 0: no share. A larger value than max_conns − 1 is lowered to max_conns − 1, without an error, so that keyed callers keep one (a pool of 1 is the share's)"},
		{Key: "database.retry_after", Meaning: "Retry-After seconds of a database 503 (at least 1)"},
		{Key: "database.acquire_timeout", Meaning: "the longest a request waits for a pooled connection"},
		{Key: "database.connect_timeout", Meaning: "the longest opening one connection takes (when the URL has no connect_timeout)"},
		{Key: "database.cancel_wait", Meaning: "the longest a cancelled statement is waited for (its connection and its request's in-flight slot held) before its connection is closed anyway"},
		{Key: "redis.url", Default: "none: buckets in process", Meaning: "Redis for budgets shared by every replica (alias REDIS_URL; secret). Run it with `maxmemory-policy noeviction` (Redis's default): an evicted bucket is a full one, and an evicted hash of open requests frees their in-flight slots early"},
		{Key: "redis.addrs", Default: "none", Meaning: "Redis Cluster seed nodes (with redis.cluster) or Sentinels (with redis.master_name), instead of redis.url"},
		{Key: "redis.cluster", Meaning: "redis.addrs name a Redis Cluster"},
		{Key: "redis.master_name", Default: "none", Meaning: "redis.addrs are Sentinels managing this master"},
		{Key: "redis.username", Default: "none", Meaning: "the user Redis authenticates (ACL); for redis.url when the URL carries none"},
		{Key: "redis.password", Default: "none", Meaning: "Redis's password (secret: GEOTOLL_REDIS_PASSWORD_FILE); for redis.url when the URL carries none"},
		{Key: "redis.timeout", Meaning: "bound of one budget call on a request's path"},
		{Key: "redis.dial_timeout", Meaning: "one connection attempt"},
		{Key: "redis.fail_mode", Meaning: "when Redis fails: local (in-process buckets holding 1 / replicas of each budget), open or closed (503)"},
		{Key: "redis.replicas", Meaning: "geotoll processes sharing the budget (each one's share of a budget in the local fallback)"},
		{Key: "redis.probe_interval", Meaning: "how long budgets follow fail_mode after a failure before one request retries Redis (at most 10s)"},
		{Key: "redis.max_clock_skew", Meaning: "how far Redis's clock may run ahead of geotoll's; a batch arriving later than its deadline plus this is dropped"},
		{Key: "redis.lease_requests", Meaning: "how many requests' price a lease of a caller takes out of its bucket ahead (at most an eighth of the bucket), with one of the caller's Redis calls and one in-flight slot: it admits the caller's requests in process, one at a time, up to twice that many, and its give-back, with the caller's next call, replays each price and settlement at the moment it happened; Redis keeps the bucket and the leases out within its capacity whichever replica refunds. 0: one call per request; at most 64"},
		{Key: "redis.lease_hold", Meaning: "how long such a lease admits requests, counted from when the call that took it was sent; then what is left of it goes back to the bucket, with the record of what it admitted"},
		{Key: "redis.peek_reuse", Meaning: "how long after Redis last answered about a caller's bucket (an admission, a refusal or a read) that answer, with the replica's settlements since, answers the caller's budget reads — /budget, dry runs — without a Redis call, refilled to the moment asked: one call per caller and interval at most, reads that miss at once sharing it; other replicas' spends within it are not seen. 0: every read is a call (at most 10s)"},
		{Key: "http.read_header_timeout", Meaning: "http.Server ReadHeaderTimeout"},
		{Key: "http.read_timeout", Meaning: "http.Server ReadTimeout"},
		{Key: "http.write_timeout", Meaning: "http.Server WriteTimeout"},
		{Key: "http.request_timeout", Meaning: "every request's own deadline: by then it is answered (503 if the database has not finished). Every statement_timeout must be shorter, and it must be shorter than http.write_timeout"},
		{Key: "http.idle_timeout", Meaning: "http.Server IdleTimeout"},
		{Key: "http.shutdown_grace", Meaning: "on SIGTERM, in-flight requests get this long"},
		{Key: "http.shutdown_delay", Meaning: "on SIGTERM, how long the server keeps serving with /readyz answering 503 before it closes its listener, so that a load balancer stops sending it requests first (0s..1m; 0s: it closes at once); a second SIGINT or SIGTERM ends the delay. /readyz answers 503 from the signal either way"},
		{Key: "http.max_header_bytes", Meaning: "http.Server MaxHeaderBytes"},
		{Key: "http.trusted_proxies", Default: "none", Meaning: "CIDRs whose forwarding header is believed (comma-separated in the environment)"},
		{Key: "http.forwarded_header", Default: "X-Forwarded-For", Meaning: "the one header the trusted proxies write the client address into: X-Forwarded-For (host and scheme from X-Forwarded-Host/-Proto; empty means it) or Forwarded (for=, host=, proto=); the other family is ignored"},
		{Key: "http.public_url", Default: "none", Meaning: `the base of the absolute URLs the server writes (TileJSON's tile URLs, the catalog's), "https://tiles.example.com/maps": set it in production behind a proxy or CDN. Then no Host or forwarding header a client sends changes them (nor do the documents Vary on forwarding headers); unset, they follow the request's scheme and host (forwarded ones from http.trusted_proxies only), and a Host that is not a valid host[:port] is a 400. An absolute http or https URL, no user, query or fragment, a port from 1 to 65535, its path base_path. The URLs written without a host (a fence's Location, next, the preview page) stay relative`},
		{Key: "http.cors.origins", Meaning: `origins allowed to call the API ("scheme://host[:port]" or "*"); none sends no CORS headers`},
		{Key: "http.cors.credentials", Meaning: `allow cookies and HTTP auth across origins; "*" with credentials refuses to start`},
		{Key: "http.cors.max_age", Meaning: "how long a browser may reuse a preflight (Access-Control-Max-Age); 0s means the default, 10m, not 0"},
		{Key: "http.ready_interval", Meaning: "the readiness checks (a database ping, a Redis probe that fails where a budget write would) run in the background, each round this long after the last one ended; /readyz serves their latest results (503 when older than two intervals and a timeout). 100ms..1m"},
		{Key: "http.ready_timeout", Meaning: "bound of one round of readiness checks (100ms..1m)"},
		{Key: "tracing.endpoint", Default: "none: off", Meaning: "OpenTelemetry OTLP/HTTP collector: an http or https URL with a host, such as http://127.0.0.1:4318 (without a path, spans go to its /v1/traces); tracing is also on when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, and that URL is checked the same way"},
		{Key: "tracing.service_name", Meaning: "the service.name of the spans (left at geotoll, OTEL_SERVICE_NAME or a service.name in OTEL_RESOURCE_ATTRIBUTES names them when set; OTEL_RESOURCE_ATTRIBUTES adds its other attributes)"},
		{Key: "tracing.sample_ratio", Meaning: "share of new traces sampled (0..1); a caller's sampled traceparent is always followed"},
	}
	return append(docs, budgetDocs()...)
}

// budgetDocs documents the keys of the budget and of what it pays for
// (throttle, layers, tiles, geofence), after configDocs' server keys.
func budgetDocs() []configDoc {
	return []configDoc{
		{Key: "throttle.prefix", Meaning: "bucket key prefix in Redis (no `{` or `}`: the keys' hash tag is their own)"},
		{Key: "throttle.tiers.<tier>.rate", Default: "anonymous 10, free 20, pro 100", Meaning: "tokens per second refilled (tiers by name; anonymous is for callers without a key; a file's tier changes only the fields it sets)"},
		{Key: "throttle.tiers.<tier>.capacity", Default: "80, 100, 600", Meaning: "bucket size: must be above the most one request may cost in the tier"},
		{Key: "throttle.tiers.<tier>.max_cost", Default: "none", Meaning: "a single request dearer than this is a 422; 0: none. Finite, and not below the least a request costs (throttle.weights.base, or a layer's weights.base), which would refuse every request of the tier"},
		{Key: "throttle.tiers.<tier>.shadow", Default: "false", Meaning: "price and record, never refuse for an empty bucket (X-RateLimit-Shadow: would-refuse)"},
		{Key: "throttle.tiers.<tier>.max_in_flight", Default: "8, 16, 64", Meaning: "concurrent requests per caller; one more is a 429 (policy <tier>-concurrency); 0: the store's own bound, 256 (Redis keeps every open request of a caller in one hash)"},
		{Key: "throttle.failed_auth.rate", Meaning: "refill of the failed-auth bucket: unknown keys, per client address"},
		{Key: "throttle.failed_auth.capacity", Meaning: "size of the failed-auth bucket (1 token per unknown key)"},
		{Key: "throttle.pricing", Default: "density", Meaning: "density: a request costs the database work its density models estimate it reads; size: by its area, radius and points alone (also while a model is being built)"},
		{Key: "throttle.ms_per_token", Default: "10", Meaning: "the unit of every price: one token is this many milliseconds of database time"},
		{Key: "throttle.settle_floor", Default: "5ms", Meaning: "a request whose database time stays under this keeps its estimate; above, it is charged the time it took (refund or debit)"},
		{Key: "throttle.timeout_factor", Default: "4", Meaning: "a request's statements run, together, under at most max(timeout_floor, min(timeout_factor × the database time it paid for, the time of the most it may be charged: max_cost, or less where its tier or the global budget holds it lower)), each within its layer's statement_timeout"},
		{Key: "throttle.timeout_floor", Default: "250ms", Meaning: "see timeout_factor"},
		{Key: "throttle.weights_file", Default: "none", Meaning: "the work models `geotoll calibrate` fitted (YAML): they replace the defaults of the layers they name; a layer's own weights still win"},
		{Key: "throttle.weights.base", Meaning: "the price of the cheapest request (a cache hit)"},
		{Key: "throttle.weights.query_ms", Meaning: "work model: database ms of a tile query itself"},
		{Key: "throttle.weights.feature_ms", Meaning: "work model: database ms per feature a tile reads"},
		{Key: "throttle.weights.vertex_ms", Meaning: "work model: database ms per vertex a tile reads (lines, polygons)"},
		{Key: "throttle.weights.area_weight", Meaning: "size pricing: tokens per square degree of a tile's or bbox's area"},
		{Key: "throttle.weights.radius_weight", Meaning: "size pricing: tokens per km of a within radius"},
		{Key: "throttle.weights.feature_weight", Meaning: "size pricing: tokens per feature a within, bbox or contains answer may hold (its limit)"},
		{Key: "throttle.weights.point_weight", Meaning: "size pricing: tokens per point of a batch check"},
		{Key: "throttle.weights.max_cost", Meaning: "the most any request (each layer of a composite tile) costs, at the door or settled; below every tier's capacity"},
		{Key: "throttle.global.rate", Default: "0: off", Meaning: "the database's shared budget, tokens per second; a refusal is a 503 (policy global) that charges the caller nothing"},
		{Key: "throttle.global.capacity", Default: "0", Meaning: "the shared budget's burst"},
		{Key: "throttle.ipv6_aggregate.prefix", Meaning: "the network (16..63) whose anonymous IPv6 callers share an aggregate bucket besides their /64 (policy anonymous-ipv6-/48)"},
		{Key: "throttle.ipv6_aggregate.rate", Meaning: "the aggregate's refill; 0 turns it off"},
		{Key: "throttle.ipv6_aggregate.capacity", Meaning: "the aggregate's size, above every price"},
		{Key: "throttle.tarpit.max_hold", Meaning: "a refusal by the caller's bucket (429) is held this long at most — no longer than the bucket needs to pay it after its refusals held before it — before it is answered, its Retry-After what remains; a client that asks again at once is refused once per hold and connection instead of as fast as the server answers. 0s: off; at most half http.request_timeout"},
		{Key: "throttle.tarpit.max_held", Meaning: "refusals held at once; beyond, a refusal is answered at once"},
		{Key: "throttle.key_refresh", Meaning: "how often API keys are reloaded besides the database's notifications"},
		{Key: "throttle.key_max_age", Meaning: "keys older than this (reloads failing all that time) are stale: the database's admin keys are refused until a reload succeeds (not the static geofence.admin_keys); at least twice key_refresh"},
		{Key: "demo_layers", Meaning: "keep the demo layers (places, districts, geofences, tile and geofence) that configured layers merge into by name; false starts from none"},
		{Key: "layers", Default: "places, districts, geofences", Meaning: "tile layers (YAML only), merged by name into the demo layers: name, table (spelt as in the database, without SQL quotes; schema to qualify a table whose name has dots), geometry_column, srid, id_column (without_id), properties, minzoom, maxzoom, extent, buffer, max_features, geometry_kind (point, line, polygon or mixed; read from geometry_columns when unset), data_maxzoom (16: the deepest zoom with new detail, TileJSON maxzoom), order_by (the priority of features: the cap keeps the first), max_tile_bytes (500000: the layer's byte budget), generalize ({maxzoom: 12, cluster_px: 8, tolerance_px: 1, min_size_px: 1}; off: true serves features as stored), overviews ({off, minzoom, maxzoom}: zooms read from the overviews geotoll prepare builds), subdivide ({off, max_vertices: 256}: line and polygon layers' rows cut by geotoll prepare into pieces of at most max_vertices vertices, read above the overview band; their overviews are stored in pieces of that size too), statement_timeout (2s), max_age (Cache-Control, 1m; 1s..8760h), weights, shadow. A number field of 0 (a duration of 0s, an empty text) means the field's default, noted beside it by `geotoll config example` (maxzoom 22, extent 4096, buffer 64, max_features 10000…): a buffer, tolerance_px or min_size_px of 0, or a max_age of 0s, cannot be asked for"},
		{Key: "tiles.cache.max_bytes", Default: "128 MiB", Meaning: "memory of the tile cache (each tile as rendered, plus its gzip form once a gzip client asked); 0 keeps only request coalescing and sends every tile as rendered, gzip-coded only to a client that refuses identity (compressing a tile for one answer costs more CPU than the bytes it saves: put a compressing proxy in front if the network needs it)"},
		{Key: "tiles.cache.ttl", Meaning: "how long a rendered tile is served from memory — or, when less, a second less than its layers' smallest max_age (half of it under 2s), so that no cached tile goes out stale"},
		{Key: "tiles.storage_refresh", Meaning: "how often serve re-reads the serving registry that geotoll prepare writes (and geometry kinds not yet known); after a read that failed (at start-up too), sooner: 1s, doubling up to 5s"},
		{Key: "tiles.discover.schemas", Default: "none: off", Meaning: "serve every table with a geometry column in these schemas that the read role can SELECT, priced with the default weights"},
		{Key: "tiles.discover.minzoom", Meaning: "discovered layers' minzoom"},
		{Key: "tiles.discover.maxzoom", Default: "22", Meaning: "discovered layers' maxzoom (0: the layer default)"},
		{Key: "tiles.discover.max_features", Default: "10000", Meaning: "discovered layers' feature cap per tile (0: the layer default)"},
		{Key: "tiles.discover.statement_timeout", Default: "2s, the layer default", Meaning: "discovered layers' statement timeout (0s: the layer default)"},
		{Key: "tiles.discover.max_age", Default: "1m, the layer default", Meaning: "discovered layers' Cache-Control max-age (0s: the layer default)"},
		{Key: "tiles.discover.max_properties", Default: "16", Meaning: "properties per discovered layer: numbers, booleans and text columns declared with a length, in column order (0: 16)"},
		{Key: "tiles.discover.max_text_length", Default: "256", Meaning: "the longest declared text length offered as a property (free text is never discovered; 0: 256)"},
		{Key: "geofence.max_radius", Meaning: "metres: the largest within radius (beyond: 422)"},
		{Key: "geofence.default_limit", Meaning: "features of an answer when ?limit is absent"},
		{Key: "geofence.max_limit", Meaning: "the largest ?limit"},
		{Key: "geofence.max_bbox_area", Meaning: "square degrees: the largest bbox"},
		{Key: "geofence.max_batch", Meaning: "points per batch check"},
		{Key: "geofence.max_body_bytes", Meaning: "query body limit: the batch check (beyond: 413)"},
		{Key: "geofence.max_fence_bytes", Meaning: "fence body limit of the admin routes (beyond: 413): a detailed coastline is several MB of GeoJSON"},
		{Key: "geofence.max_vertices", Meaning: "positions per fence written (fences are stored cut into pieces of 256 vertices)"},
		{Key: "geofence.max_response_vertices", Meaning: "the most positions one within, bbox or contains answer carries (a feature larger than it is left out alone; within and bbox then end before the first other that would pass it, contains leaves out each fence that would: truncated), and one page of the fence list (a page ends before the fence that would pass it, with next; a larger fence is alone on its page)"},
		{Key: "geofence.statement_timeout", Meaning: "geofence queries' statement timeout"},
		{Key: "geofence.fence_write_timeout", Meaning: "the statement timeout of each statement of a fence write (cutting a fence of several hundred thousand positions into pieces takes seconds); less than http.request_timeout"},
		{Key: "geofence.layers", Default: "places, districts, geofences", Meaning: "searchable layers (YAML only), merged by name into the demo layers: name, table (schema.table, spelt as in the database, without SQL quotes), geometry_column (SRID 4326), id_column, properties, statement_timeout; polygon layers also answer contains and check with ?layer= (from their pieces when geotoll prepare built them)"},
		{Key: "geofence.admin_keys", Default: "none", Meaning: "static fence admin keys (at least 16 bytes each) besides database keys created with -admin (secret: GEOTOLL_GEOFENCE_ADMIN_KEYS_FILE, comma-separated)"},
		{Key: "geofence.writer_database_url", Default: "none: writes 404", Meaning: "fence writes, as the geotoll_fence_writer role (alias GEOTOLL_WRITER_DATABASE_URL; secret)"},
	}
}

// writeDoc writes the configuration reference as a Markdown table: key,
// environment variable, default, meaning.
func writeDoc(w io.Writer) error {
	envs := map[string]string{}
	for _, s := range settingsOf(DefaultConfig()) {
		envs[docKey(s.Key)] = s.Env
	}
	var b strings.Builder
	b.WriteString("| key (YAML) | environment | default | meaning |\n| --- | --- | --- | --- |\n")
	cfg := DefaultConfig()
	for _, d := range configDocs() {
		env := envs[d.Key]
		if strings.Contains(d.Key, tierPattern) {
			env = envName(strings.Replace(d.Key, tierPattern, "TIER", 1))
			env = strings.Replace(env, "_TIER_", "_<TIER>_", 1)
		}
		if env == "" {
			env = "YAML only"
		} else {
			env = "`" + env + "`"
		}
		def := d.Default
		if def == "" {
			def = defaultText(cfg, d.Key)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.Key, env, def, strings.ReplaceAll(d.Meaning, "|", `\|`))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// defaultText shows the default of key in cfg.
func defaultText(cfg Config, key string) string {
	v := reflect.ValueOf(cfg)
	for part := range strings.SplitSeq(key, ".") {
		f, ok := fieldByYAML(v, part)
		if !ok {
			return "?"
		}
		v = f
	}
	switch {
	case v.Kind() == reflect.Pointer && !v.IsNil():
		v = v.Elem()
	case v.Kind() == reflect.Slice && v.Len() == 0, v.Kind() == reflect.String && v.Len() == 0:
		return "none"
	}
	if v.Type() == durationType {
		return "`" + fmt.Sprint(v.Interface()) + "`"
	}
	if v.Kind() == reflect.Slice {
		return "`" + strings.Join(v.Interface().([]string), ",") + "`"
	}
	return "`" + fmt.Sprint(v.Interface()) + "`"
}
