package gateway

import (
	"net/http"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// requestCredential is the credential the request authenticates by, in
// its format's order: headers (credential), and for Gemini also the key
// query parameter (geminiCredential). The tenant and the data keys both
// derive from it, so they always agree.
func requestCredential(r *http.Request, format provider.Format) string {
	if format == provider.Gemini {
		return geminiCredential(r)
	}
	return credential(r.Header, format)
}

// geminiCredential is the credential a Gemini request authenticates by:
// the x-goog-api-key header, else the key query parameter (the URL as
// sent is never logged: the log line carries the path only), else
// Authorization (Vertex AI's OAuth bearer token). It is only ever handed
// to the keyed hash.
func geminiCredential(r *http.Request) string {
	if v := r.Header.Get("X-Goog-Api-Key"); v != "" {
		return v
	}
	if v := r.URL.Query().Get("key"); v != "" {
		return v
	}
	return r.Header.Get("Authorization")
}
