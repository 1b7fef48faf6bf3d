package caddymodule

import "net/http"

// geminiFormat is the compiler's name of the Gemini format.
const geminiFormat = "gemini"

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
