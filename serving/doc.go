// Package serving builds the serving storage of tile layers: relations
// derived from a layer's table that its tiles read instead of it. `geotoll
// prepare` runs [Prepare] with every [Builder] of [Builders]: [Overview]
// (per-zoom overview tables of the layer's low zooms; a line or polygon
// layer's stored in pieces) and [Subdivide] (a line or polygon layer's
// rows cut into pieces of few vertices, for the zooms above). Package tiles reads what was built (tiles.LoadStorage,
// tiles.Catalog.Refresh).
//
// # Schema and registry (the contract)
//
// Migration 00006_serving.sql creates schema geotoll_serving, owned by the
// schema owner (the admin database URL, which `prepare` connects as),
// with USAGE for geotoll_reader; `prepare` grants SELECT on each table it
// builds to its read role alone (Options.ReaderRole; 00012 took back the
// default privileges that let geotoll_reader read them all). Its
// registry, geotoll_serving.storage, has one row per built relation:
//
//	layer, builder, relation        primary key; relation is a table in
//	                                geotoll_serving (unique): its stable
//	                                name (RelationName) and the generation
//	                                of the build that made it ("_v" and the
//	                                transaction id in base 36), new at every
//	                                rebuild
//	zoom_min, zoom_max              the tile zooms it serves, or both NULL
//	                                for storage that serves no tile zoom
//	geometry_column, srid,          its geometry ("geom", 3857 for
//	geometry_kind                   overviews); kind point, line, polygon, mixed
//	columns                         the relation's columns that hold the
//	                                layer's source columns it carries (id,
//	                                properties, order_by): the pieces' by
//	                                their own names, an overview's by names
//	                                of its own (c0, c1…)
//	params                          what was built (tiles.StorageParams as
//	                                JSON: version, zoom, cells, lengths…);
//	                                source_columns, when present, names
//	                                the layer's source column each of
//	                                columns holds, in the same order (an
//	                                overview's); absent, columns are the
//	                                source columns, each held by its own
//	                                name (the pieces, overviews of
//	                                version 1)
//	source_table,                   the layer's table, as prepare resolved
//	source_geometry_column          it, with its schema (quoted:
//	                                "schema"."table"), and its geometry
//	                                column
//	source_rows, source_signature   the source when built: row count and
//	                                change detector ("count:newest
//	                                xmin:writers' checksum:columns'
//	                                fingerprint", package signature; ""
//	                                for a view: rebuilt every run)
//	rows, build_ms, built_at        the build
//	checked_at                      when prepare last found it current
//
// serve chooses, for each zoom of a layer, the registry row whose
// zoom_min..zoom_max covers it with the narrowest range (a per-zoom
// overview beats storage serving every zoom); zooms no row covers read the
// layer's table. A row is used only if its builder is one serve reads,
// the layer's configuration still asks for it (an overview of a zoom in
// the layer's overview band, generalize and overviews on; pieces with
// subdivide on), its kind is the layer's, its source columns
// (params.source_columns, else columns) include every column the layer
// reads now (each read from the relation's column columns lists at the
// same index), an overview's params record the
// generalisation the layer's settings ask for now at its zoom
// (tiles.Layer.OverviewParams: cluster_px, tolerance_px, min_size_px and
// order_by, whatever the builder's version; max_vertices, the size of the
// pieces it is stored in, is not compared: it is read as recorded), and
// it was built from the
// layer's table and geometry column as
// configured now (to_regclass(source_table) is the relation the layer's
// table names under the read role's search_path, source_geometry_column
// its geometry column): a table named without its schema may be another
// table for serve than for prepare, whose search_path is the schema
// owner's. A source_table without a schema (recorded by an older
// prepare) names no table for serve: the layer reads its table until the
// next run rebuilds the storage. A server
// that predates source_columns takes columns for the layer's own names:
// an overview's lists only the names the relation holds, so such a server
// finds the layer's columns missing from it and reads the layer's table at
// its zoom (it would otherwise read a column the overview does not have,
// and every tile of the zoom would fail).
//
// # A build
//
// For each layer and builder, [Prepare] asks the builder for its targets
// ([Builder.Targets]: the relations it keeps for the layer, and their
// params). When the registry already holds exactly those targets, built
// from the layer's table and geometry column (source_table the table the
// run resolves, with its schema, and source_geometry_column the
// configuration's) with the same signature, and every relation they name
// exists, the run renews checked_at and builds nothing: a run with
// nothing changed reads each table once (count(*), max(xmin) and
// sum(hashint8(xmin)), a checksum of the xmins, with a fingerprint of the
// columns' definitions from pg_attribute: sql/table_signature.sql) and is
// quick. The fingerprint catches schema changes that change what rows
// hold without writing them, so that no xmin moves: a column renamed
// (two swapped), dropped and added again under its name, added with a
// constant DEFAULT (a new column number), changed to a binary-coercible type;
// it covers every column of the table, copied or not. Signatures are
// compared as written: storage recorded in an older form of the
// signature (without the checksum, or without the fingerprint) is rebuilt
// once (servers compare the older form as far as it goes meanwhile,
// signature.Same). A registry row whose relation is gone (dropped by
// hand, lost by a restore: sql/serving_missing.sql) is not current
// either, and is built again. Otherwise, holding the layer's
// advisory lock (a second run skips the layer: Skipped, Reason LayerBusy;
// so does a removal), in one REPEATABLE READ transaction begun once the
// lock is held, it:
//
//  1. computes the signature again, in the snapshot the build reads, and
//     reads the registry again: storage another run built meanwhile is
//     current, and the layer is skipped (Reason BuiltByOther) unless Force;
//  2. builds each target into a new table, "<relation>_v<generation>"
//     ([Builder.Build]: create, fill, index as "<table>_<suffix>"), then
//     grants it to the read role and analyzes it;
//  3. switches: deletes the builder's registry rows of the layer, lists
//     the relations they named in geotoll_serving.retired, and inserts
//     the rows of the new tables. Nothing served is locked: tile queries
//     read the old tables, undisturbed, while the build runs and after;
//  4. commits: readers of the registry see the old storage or the new,
//     never a mix. A failed build leaves the old storage served, and its
//     tables vanish with its transaction.
//
// A server reads the new tables once it re-reads the registry (every
// tiles.storage_refresh), re-planning its tile queries for their names.
// Each run ends by dropping the tables retired longer ago than
// Options.Retain (10 minutes; `prepare -retain`, at least twice
// tiles.storage_refresh), each under a lock_timeout of
// Options.LockTimeout (50 ms): one a lagging server still reads is left
// for a later run, and no query queues long behind the drop. A server
// that reads a table already dropped (its refresh failed for longer than
// Options.Retain) answers 503 to the tile that finds it gone, and reads
// the layer's table from then on until it re-reads the registry.
//
// Before building, and before finding storage current, [Prepare] checks
// that storage readable by the read role shows it nothing the table
// hides from it (prepare reads the table as the schema owner): that the
// read role may use the table's schema and read every column it would
// copy (else the layer fails, naming the role), that the table is not a
// foreign table, nor a parent of a foreign partition or child (Reason
// ForeignTable: the read role reads it through its own user mapping),
// that no row-level security filters what the read
// role reads of the table (Reason RowSecurity: the owner reads past it,
// or, forced on the owner, through the owner's policies), that the table
// is no view with security_invoker, nor a view that reads one (Reason
// InvokerView: the read role reads its relations with its own rights and
// row security), and that it is no view that reads a table with
// row-level security enabled (Reason ViewRowSecurity: the read role reads
// the view with the view owner's rights, but the table's policies apply,
// and current_user in them is whoever reads the view, so that prepare may
// see other rows than the read role), nor a view that may filter by who
// reads it without row security (Reason RoleDependentView: it, or a view
// it reads, names CURRENT_USER, SESSION_USER, CURRENT_ROLE or USER,
// checks a privilege or a role, reads a setting, or calls a function or
// operator that is neither built in nor an extension's, whose body is
// not read). A view's relations are those its query names, followed
// through the views among them; a materialized view is not checked, nor
// followed: it holds the rows of its last refresh, which the read role
// reads whole.
//
// The rules are conservative: they ask whether row security applies to
// the read role, not what its policies let it see. A table whose
// policies show the read role every row (CREATE POLICY … TO
// geotoll_reader USING (true)) is refused too, as is a view over a table
// with any row security, whatever its policies and whoever owns the
// view. To have storage built, grant the read role BYPASSRLS, or disable
// row security on the table; for a view, disable it on the tables the
// view reads (the read role's BYPASSRLS does not lift policies applied
// with the view owner's rights), or build the layer from a materialized
// view.
//
// A layer refused so has its storage withdrawn: the storage the registry
// names is retired, and the read role's SELECT is revoked at once from
// it and from the layer's storage retired before (by a rebuild, and not
// dropped yet) that the role may still read: a server that has not
// re-read the registry fails those tiles until it does, rather than show
// the rows. The layer's tiles read the table. The build's transaction
// checks again, in its snapshot (a table's lock, or a view's with the
// tables it reads, is taken before it, so that no ALTER TABLE enabling
// row security commits in between). In the
// build's transaction, it builds no pieces from a table whose id column
// holds NULL or repeats an id (see [Subdivide]): the layer is skipped
// with the reason, and its tiles read the table.
//
// Storage is in two dimensions, as tiles draw a layer: a table's Z and M
// are dropped (ST_Force2D).
//
// # Keeping it current
//
// Storage is rebuilt by running `geotoll prepare` again: from cron or a
// systemd timer, or as a long-running process with `-every 10m`. Each run
// rebuilds only what changed. serve re-reads the registry every
// tiles.storage_refresh (30 s), drops the cached tiles of layers whose
// storage changed, and exports how stale each layer's storage may be:
// geotoll_tile_storage_age_seconds (seconds since checked_at), also in
// TileJSON and the /tiles catalog (storage[].age_seconds). serve itself
// never writes: it connects as the read-only role. Pieces are kept
// current the same way: any committed write to the layer's table, or
// change of its columns, changes its signature, and the next run
// rebuilds them.
//
// A layer that fails before any builder runs (its kind or the registry
// unreadable) is one Result, builder "", logged as an error as a
// builder's failure is; on a database without the registry (not
// migrated) its error says to run `geotoll migrate` first.
//
// Other code finds the pieces of a table by the registry:
// builder = 'subdivide' AND source_table::regclass = <the table>::regclass
// (relation is the pieces' table; columns include the id column).
//
// # Adding a builder
//
// A builder implements
// [Builder] and is added to [Builders]: its targets name their relations
// (RelationName(layer, suffix)), zoom ranges (or -1 for none), columns and
// params; its Build fills job.Next[relation] and names its indexes
// job.Index(target, suffix). The runner does the rest (change detection,
// generations, grants, registry, retiring). To be read by tiles, package tiles must know
// its builder name (tiles.Layer.usable).
package serving
