package geofence

import (
	"net/http"

	"github.com/gorilla/mux"
)

// testRouter routes the handler's paths as package server does, for the
// tests of this package: the fence admin under both its path and its
// older one.
func testRouter(h *Handler) *mux.Router {
	r := mux.NewRouter()
	r.HandleFunc("/geofence/within", h.Within).Methods(http.MethodGet)
	r.HandleFunc("/geofence/bbox", h.BBox).Methods(http.MethodGet)
	r.HandleFunc("/geofence/contains", h.Contains).Methods(http.MethodGet)
	r.HandleFunc("/geofence/check", h.Check).Methods(http.MethodPost)
	for _, list := range []string{FencesPath, "/geofences"} {
		byID := list + "/{" + VarID + ":[0-9]+}"
		r.HandleFunc(list, h.Admin(h.ListFences)).Methods(http.MethodGet)
		r.HandleFunc(list, h.Admin(h.CreateFence)).Methods(http.MethodPost)
		r.HandleFunc(byID, h.Admin(h.GetFence)).Methods(http.MethodGet)
		r.HandleFunc(byID, h.Admin(h.ReplaceFence)).Methods(http.MethodPut)
		r.HandleFunc(byID, h.Admin(h.DeleteFence)).Methods(http.MethodDelete)
	}
	return r
}
