package geofence

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/geotoll/geotoll/apikeys"
	"github.com/geotoll/geotoll/internal/dryrun"
	"github.com/geotoll/geotoll/problem"
)

// MinAdminKeyLen is the shortest admin key accepted in configuration.
const MinAdminKeyLen = 16

// adminKeys holds the SHA-256 of each admin key. Comparing digests in
// constant time means neither a key's contents nor its length leak through
// timing, and no raw key stays in memory beyond start-up.
type adminKeys [][sha256.Size]byte

func newAdminKeys(keys []string) (adminKeys, error) {
	out := make(adminKeys, 0, len(keys))
	for i, k := range keys {
		if len(k) < MinAdminKeyLen || strings.TrimSpace(k) != k {
			return nil, fmt.Errorf("geofence: admin key %d must be at least %d bytes without surrounding spaces", i, MinAdminKeyLen)
		}
		out = append(out, sha256.Sum256([]byte(k)))
	}
	return out, nil
}

// AllowAdmin implements Authorizer: r must carry one of the admin keys. Every configured
// key is compared, match or not, so the time taken does not say which one
// matched.
func (k adminKeys) AllowAdmin(r *http.Request) bool {
	key, _ := apikeys.Presented(r, false) // never ?key=: URLs end up in logs
	if key == "" {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	match := 0
	for i := range k {
		match |= subtle.ConstantTimeCompare(sum[:], k[i][:])
	}
	return match == 1
}

// Admin wraps a fence admin handler: callers without an admin key get 401.
// Admin calls are not priced from a bucket; they are bounded by the fence
// size (MaxFenceBytes) and vertex limits and by the statement timeout
// instead.
func (h *Handler) Admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.admins.AllowAdmin(r) {
			if h.refuse != nil {
				h.refuse(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="geotoll admin"`)
			problem.Write(w, r, &problem.Error{Code: problem.Unauthorized, Detail: "fence admin needs an admin API key (X-API-Key or Authorization: Bearer)"})
			return
		}
		next(w, r)
	}
}

// writable returns the writer, or writes 404 when fence admin has none,
// or 400 for a write asked for as a dry run or with another query
// parameter (noDryRun).
//
// A server without a writer never takes fence writes: that is its
// configuration, not a passing outage, so it is not a 503, which tells a
// client to retry (after Retry-After). It is a 404, as for a route the
// server does not have: fence writes do not exist on this server.
func (h *Handler) writable(w http.ResponseWriter, r *http.Request) (Writer, bool) {
	if h.writer == nil {
		problem.Write(w, r, problem.Missing("", "fence admin not configured: this server takes no fence writes (it has no writer database)"))
		return nil, false
	}
	if err := noDryRun(r); err != nil {
		problem.Write(w, r, err)
		return nil, false
	}
	return h.writer, true
}

// noDryRun refuses a fence write sent with a dry_run other than 0 or
// false, with another query parameter (dryrun=, a misspelt dry_run, would
// otherwise be written), or with a query string that does not parse: writes are not
// priced, so they have no preview, and a caller who meant to try one must
// not have it made.
func noDryRun(r *http.Request) error {
	qs, err := parseQuery(r, writeParams)
	if err != nil {
		return err
	}
	if dry, err := dryrun.Values(url.Values(qs)); err != nil || !dry {
		return err
	}
	return problem.Malformed("dry_run", "fence writes have no dry run (they are not priced): nothing was written; send the write without dry_run")
}

func fenceID(r *http.Request) (int64, error) { return ParseFenceID(mux.Vars(r)[VarID]) }

// turn waits for one of the MaxFenceWrites turns to parse and write a
// fence, while the request lasts; done gives it back. When the request
// ends first it writes 503 and ok is false.
func (h *Handler) turn(w http.ResponseWriter, r *http.Request) (done func(), ok bool) {
	select {
	case h.writing <- struct{}{}:
		return func() { <-h.writing }, true
	case <-r.Context().Done():
		problem.Write(w, r, &problem.Error{Code: problem.Unavailable, RetryAfter: 1,
			Detail: fmt.Sprintf("%d other fence writes were under way until the request ended; try again", MaxFenceWrites)})
		return nil, false
	}
}

// ListFences serves GET /geofence/fences[?after=id&limit=n]: a page of fences in
// id order, of at most limit fences and MaxResponseVertices positions in
// all — the bound a contains answer has, so that a page's bytes and the
// memory it takes do not grow with the fences' size. A page ends early,
// before the first fence that would take it past the positions; its first
// fence is answered whatever its size, alone on its page if need be, so
// that every fence can be listed. When the page is full or ended early,
// the collection's "next" member is the URL of the following page. Ids are taken when a write starts, not when
// it commits, so a fence may commit behind a page already read: the pages
// are a listing, not a change feed (README says so). If-Match and If-None-Match are evaluated
// against the collection, which has no ETag (see
// failedOnCollection): 412 for an If-Match other than *,
// 304 for If-None-Match *.
func (h *Handler) ListFences(w http.ResponseWriter, r *http.Request) {
	qs, err := parseQuery(r, listParams)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	limit, err := qs.limit(h.limits)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	var after int64
	if s, err := qs.get("after"); err != nil {
		problem.Write(w, r, err)
		return
	} else if _, given := qs["after"]; given && s != "0" {
		if after, err = ParseFenceID(s); err != nil {
			if problem.From(err).Code == problem.NotFound { // well formed, past every id
				problem.Write(w, r, problem.Range("after", "after must be within [0, %d]", int64(math.MaxInt64)))
				return
			}
			problem.Write(w, r, problem.Malformed("after", "after must be a fence id"))
			return
		}
	}
	cond, err := ParsePreconditions(r.Header)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	switch header := failedOnCollection(cond); header {
	case "If-Match":
		problem.Write(w, r, collectionPreconditionFailed(header, false))
		return
	case "If-None-Match":
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	fs, cut, err := h.reader.Fences(r.Context(), FencesQuery{After: after, Limit: limit, MaxVertices: h.limits.MaxResponseVertices})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeCollection(w, r, http.StatusOK, fs, func(c *collection) {
		if len(fs) > 0 && (cut || len(fs) == limit) {
			c.Next = h.base + FencesPath + "?after=" + strconv.FormatInt(fs[len(fs)-1].ID, 10) + "&limit=" + strconv.Itoa(limit)
		}
	})
}

// GetFence serves GET /geofence/fences/{id}: the fence with its ETag;
// 304 when If-None-Match names it, 412 when If-Match does not (see
// Preconditions).
func (h *Handler) GetFence(w http.ResponseWriter, r *http.Request) {
	id, err := fenceID(r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	if _, err := parseQuery(r, nil); err != nil {
		problem.Write(w, r, err)
		return
	}
	cond, err := ParsePreconditions(r.Header)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	f, err := h.reader.Fence(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	switch cond.Failed(fenceETag(f.Revision)) {
	case "If-Match":
		problem.Write(w, r, preconditionFailed(id, "If-Match", false))
		return
	case "If-None-Match":
		hdr := w.Header()
		hdr.Set("ETag", fenceETag(f.Revision))
		hdr.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.writeFence(w, r, http.StatusOK, f)
}

// writeFence answers a fence with its ETag.
func (h *Handler) writeFence(w http.ResponseWriter, r *http.Request, status int, f Feature) {
	if f.Revision != 0 {
		w.Header().Set("ETag", fenceETag(f.Revision))
	}
	h.writeJSON(w, r, status, ContentType, f)
}

// CreateFence serves POST /geofence/fences with a GeoJSON Feature (see
// ParseFence): 201 with the stored fence and its Location; 412 when
// If-Match or If-None-Match cannot hold for the collection (see
// failedOnCollection).
//
// What the request's head settles — a malformed If-Match or
// If-None-Match (400), a media type other than JSON or a content coding
// (415), a Content-Length over the limit (413) — is answered before the
// request waits for a turn: it needs none, and waiting could last the
// whole request and end in a 503.
func (h *Handler) CreateFence(w http.ResponseWriter, r *http.Request) {
	writer, ok := h.writable(w, r)
	if !ok {
		return
	}
	cond, err := ParsePreconditions(r.Header)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	body, err := h.fenceBody(w, r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	done, ok := h.turn(w, r)
	if !ok {
		return
	}
	defer done()
	in, err := ParseFence(body, h.limits.MaxVertices)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	if header := failedOnCollection(cond); header != "" {
		problem.Write(w, r, collectionPreconditionFailed(header, true))
		return
	}
	f, err := writer.CreateFence(r.Context(), in)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.wrote()
	w.Header().Set("Location", h.base+FencesPath+"/"+strconv.FormatInt(f.ID, 10))
	h.writeFence(w, r, http.StatusCreated, f)
}

// fenceBody is a fence write's body, for ParseFence: it must be JSON by
// its Content-Type, if it has one (see jsonBody), and come without a
// content coding and within MaxFenceBytes (see requestBody). Each is
// checked from the request's head, in that order, before a byte of the
// body is read. The body is then read whole, before the write waits for
// a turn: an upload that is slow to arrive (or stalls until the server's
// read timeout) holds none, and the turns bound what they are for, the
// decoding, some 30 times the body's bytes.
func (h *Handler) fenceBody(w http.ResponseWriter, r *http.Request) (io.Reader, error) {
	if err := jsonBody(w, r); err != nil {
		return nil, err
	}
	body, err := requestBody(w, r, h.limits.MaxFenceBytes)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, unreadBody(raw, err)
	}
	return bytes.NewReader(raw), nil
}

// unreadBody is the problem of a fence body whose reading failed with err
// after raw arrived, answered at once, without a turn, as ParseFence would
// have answered it reading as it went: a syntax error in what arrived as
// such, a body cut short as one that ends before its JSON does, else the
// reading's own (a 413, a 408). The request's context ends with its
// connection: waiting for a turn then could end in a 503 instead.
func unreadBody(raw []byte, err error) error {
	if at, msg, ok := syntaxErrorAt(raw); ok && !strings.Contains(msg, "unexpected end of JSON input") {
		return problem.Malformed("body", "malformed JSON at byte %d: %s", at, msg)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return problem.Malformed("body", "malformed JSON at byte %d: the body ends before its JSON does", len(raw))
	}
	return bodyError(err)
}

// ReplaceFence serves PUT /geofence/fences/{id}: the fence's name, kind and
// geometry are replaced, and the answer carries its new ETag; 404 when it
// does not exist (PUT does not create, whatever the conditions), 412 when
// If-Match or If-None-Match does not hold (see Preconditions). As for
// CreateFence, the errors of the request's head come before the wait for a
// turn.
func (h *Handler) ReplaceFence(w http.ResponseWriter, r *http.Request) {
	writer, ok := h.writable(w, r)
	if !ok {
		return
	}
	id, err := fenceID(r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	cond, err := ParsePreconditions(r.Header)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	body, err := h.fenceBody(w, r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	done, ok := h.turn(w, r)
	if !ok {
		return
	}
	defer done()
	in, err := ParseFence(body, h.limits.MaxVertices)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	f, err := writer.ReplaceFence(r.Context(), id, in, cond)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.wrote()
	h.writeFence(w, r, http.StatusOK, f)
}

// DeleteFence serves DELETE /geofence/fences/{id}: 204, 404 when it does not
// exist, or 412 when If-Match or If-None-Match does not hold (see
// Preconditions).
func (h *Handler) DeleteFence(w http.ResponseWriter, r *http.Request) {
	writer, ok := h.writable(w, r)
	if !ok {
		return
	}
	id, err := fenceID(r)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	cond, err := ParsePreconditions(r.Header)
	if err != nil {
		problem.Write(w, r, err)
		return
	}
	if err := writer.DeleteFence(r.Context(), id, cond); err != nil {
		h.fail(w, r, err)
		return
	}
	h.wrote()
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
