package recovery

import (
	"net/http"
	"strconv"
	"strings"
)

// NewAPI returns the artifact API, to be served under cfg.Path (the glue
// routes every request whose path starts with it here and never forwards
// it):
//
//	GET {path}artifacts/{id}?offset=0&limit=8000  -> Page
//	GET {path}artifacts?q=TEXT&limit=N            -> Hits
//
// tenantOf computes the caller's tenant from its credential, exactly as the
// compiler's scope is computed, so a caller reads only what its own requests
// vaulted; false means it cannot (the request is refused). An unknown id,
// another tenant's id and a malformed id get the same 404 body.
func NewAPI(arts Artifacts, tenantOf func(*http.Request) (string, bool), cfg Config) http.Handler {
	cfg = cfg.WithDefaults()
	return &api{r: reader{arts: arts, cfg: cfg}, tenantOf: tenantOf, prefix: cfg.Path + "artifacts"}
}

type api struct {
	r        reader
	tenantOf func(*http.Request) (string, bool)
	prefix   string // {path}artifacts
}

var (
	errNoRoute    = &Error{Status: http.StatusNotFound, Type: "not_found", Message: "no such endpoint"}
	errMethod     = &Error{Status: http.StatusMethodNotAllowed, Type: "method_not_allowed", Message: "only GET is served"}
	errNoIdentity = &Error{Status: http.StatusUnauthorized, Type: "unauthorized", Message: "the request carries no credential the gateway can scope"}
)

func (a *api) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rest, ok := strings.CutPrefix(req.URL.Path, a.prefix)
	if !ok || (rest != "" && rest[0] != '/') {
		writeError(w, errNoRoute)
		return
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, errMethod)
		return
	}
	tenant, ok := a.tenantOf(req)
	if !ok {
		writeError(w, errNoIdentity)
		return
	}
	q := req.URL.Query()
	limit, lerr := queryInt(q.Get("limit"), "limit")
	switch {
	case rest == "" || rest == "/":
		if lerr != nil {
			writeError(w, lerr)
			return
		}
		hits, err := a.r.search(req.Context(), tenant, q.Get("q"), limit)
		writeResult(w, hits, err)
	default: // any other id, however malformed, is just not found

		offset, oerr := queryInt(q.Get("offset"), "offset")
		if oerr == nil {
			oerr = lerr
		}
		if oerr != nil {
			writeError(w, oerr)
			return
		}
		page, err := a.r.page(req.Context(), tenant, rest[1:], offset, limit)
		writeResult(w, page, err)
	}
}

// queryInt parses a non-negative decimal parameter; empty is 0 (the
// default). A limit of 0 given explicitly is refused.
func queryInt(s, name string) (int, *Error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || s[0] == '+' || (name == "limit" && n == 0) {
		if name == "limit" {
			return 0, badRequest("limit must be a positive integer")
		}
		return 0, badRequest(name + " must be a non-negative integer")
	}
	return n, nil
}

func writeResult[T any](w http.ResponseWriter, v *T, err *Error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, marshal(v))
}

func writeError(w http.ResponseWriter, e *Error) { writeJSON(w, e.Status, errorJSON(e)) }

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store") // private content: never cached on the way
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
